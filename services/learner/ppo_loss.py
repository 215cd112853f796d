"""The PPO objectives (Schulman et al. 2017, arXiv:1707.06347) as pure functions: the
clipped surrogate (section 3) and the adaptive KL penalty (section 4), which share
everything but the policy term.

Semantics follow CleanRL's `ppo.py` line for line, whose choices are explained in Huang et
al., "The 37 Implementation Details of Proximal Policy Optimization" (ICLR blog track 2022,
https://iclr-blog-track.github.io/2022/03/25/ppo-implementation-details/), cited below as
"37 details #n". Tensors in, (loss, stats) out: no optimizer step, no logging, no I/O.

In the asynchronous mode `old_logp` is the behaviour policy's log-prob that the actor sent,
so the ratio also corrects for policy lag (docs/concepts/versions-and-staleness.md).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["OBJECTIVES", "PPOLossStats", "adapt_kl_coef", "ppo_loss"]

OBJECTIVES = ("clip", "kl-penalty")


class PPOLossStats(NamedTuple):
    """Detached scalars for logging under `losses/`; none of them carries a graph."""

    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor
    clip_fraction: Tensor


def ppo_loss(
    new_logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    new_values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    entropy: Tensor,
    *,
    clip_coef: float,
    vf_coef: float,
    ent_coef: float,
    clip_vloss: bool,
    norm_adv: bool,
    objective: str = "clip",
    kl_coef: float = 0.0,
) -> tuple[Tensor, PPOLossStats]:
    """Return (loss, stats) for one minibatch; every input is [B].

    Gradients flow into `new_logp`, `new_values` and `entropy` only (the other inputs are
    rollout data and should not require grad). The loss is

        pg_loss - ent_coef * entropy.mean() + vf_coef * v_loss

    with, for objective "clip", pg_loss = mean(max(-A * ratio, -A * clip(ratio, 1 - c,
    1 + c))), the negated pessimistic (min) surrogate of Schulman et al. 2017, eq. 7; for
    "kl-penalty", pg_loss = mean(-A * ratio) + kl_coef * mean(KL), eq. 8, with KL(old ||
    new) per sample by the k3 estimator below (unbiased in value and in gradient for actions
    drawn from the old policy); `kl_coef` is the adaptive beta (adapt_kl_coef). clip_coef
    still clips the value loss (clip_vloss) and defines clip_fraction, reported for both.

    Raises ValueError when norm_adv is set and B < 2: the sample std of one element is NaN
    and would silently poison the weights.
    """
    if norm_adv and advantages.numel() < 2:
        raise ValueError("norm_adv needs a minibatch of at least 2 elements")

    logratio = new_logp - old_logp  # [B]
    ratio = logratio.exp()  # [B]

    # At the learner's minibatch sizes each tensor op costs more to dispatch than to
    # compute, so what is used twice is computed once (ratio - 1, -A, mean and std).
    with torch.no_grad():
        # k3 estimator of KL(old || new), unbiased and always >= 0 (Schulman, "Approximating
        # KL Divergence", http://joschu.net/blog/kl-approx.html); 37 details #12.
        ratio_m1 = ratio - 1.0
        approx_kl = (ratio_m1 - logratio).mean()
        clip_fraction = (ratio_m1.abs() > clip_coef).float().mean()

    if norm_adv:
        # Per-minibatch normalization, with torch's unbiased std as in CleanRL (37 details #7).
        std, mean = torch.std_mean(advantages)
        advantages = normalize_advantages(advantages, mean, std)

    # Clipped surrogate (37 details #8). The max of the negated terms is the min of the
    # surrogates: outside [1 - c, 1 + c] in the direction the advantage pushes, the clipped
    # term is constant and wins, so that sample gives no gradient.
    neg_advantages = -advantages
    pg_loss1 = neg_advantages * ratio  # [B]
    if objective == "clip":
        pg_loss2 = neg_advantages * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)  # [B]
        pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    elif objective == "kl-penalty":
        # The penalty differentiates the same k3 estimator that approx_kl reports.
        pg_loss = pg_loss1.mean() + kl_coef * ((ratio - 1.0) - logratio).mean()
    else:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")

    # Value loss, clipped around the rollout's values with the same coefficient
    # (37 details #9; Engstrom et al. 2020 found the clipping does not help, hence the flag).
    if clip_vloss:
        v_loss_unclipped = (new_values - returns) ** 2  # [B]
        v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2  # [B]
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * F.mse_loss(new_values, returns)  # mean((new - returns)^2): one op

    entropy_loss = entropy.mean()
    # Overall loss with an entropy bonus (37 details #10). Without a bonus the entropy term
    # is left out rather than multiplied by 0, so backward never walks the entropy's graph.
    loss = pg_loss + vf_coef * v_loss
    if ent_coef != 0.0:
        loss = loss - ent_coef * entropy_loss

    stats = PPOLossStats(
        policy_loss=pg_loss.detach(),
        value_loss=v_loss.detach(),
        entropy=entropy_loss.detach(),
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
    )
    return loss, stats


def normalize_advantages(advantages: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """(A - mean) / (std + 1e-8): a minibatch's advantages on the scale of its statistics
    (its own, or a learner group's over the same minibatch step on every rank)."""
    return (advantages - mean) / (std + 1e-8)


def adapt_kl_coef(kl_coef: float, kl: float, target: float) -> float:
    """The PPO paper's rule for the penalty's coefficient after an update (section 4):
    halve it when the policy moved less than target / 1.5, double it when more than
    target * 1.5, else keep it."""
    if kl < target / 1.5:
        return kl_coef / 2.0
    if kl > target * 1.5:
        return kl_coef * 2.0
    return kl_coef
