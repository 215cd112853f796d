"""Gradients of the PPO loss for the MLP actor-critic, derived by hand.

At CartPole sizes autograd's bookkeeping costs more than the arithmetic: an SGD step on the
64-64 actor-critic took ~2.1 ms through autograd + torch.optim and ~0.4 ms with these
formulas (`python -m benchmarks.learner_update`). The maths is small because the model is:
tanh MLPs, a categorical or diagonal-Gaussian head, and the loss of `ppo_loss.py`

    loss = pg_loss - ent_coef * mean(entropy) + vf_coef * v_loss.

Every function computes exactly what `ActorCritic.evaluate` + `ppo_loss` compute (tests
check values and gradients against autograd in float64); `autograd` stays selectable with
`--gradients autograd` as the reference. Shapes: B samples, A actions (or action dims).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ppomq.policy import ActorCritic

from .ppo_loss import PPOLossStats

Layer = tuple[Tensor, Tensor]  # (weight [out, in] as in nn.Linear, bias [out])
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Minibatch(NamedTuple):
    obs: Tensor  # [B, obs_dim] float
    actions: Tensor  # [B] int64 or [B, A] float
    old_logp: Tensor  # [B]
    old_values: Tensor  # [B]
    advantages: Tensor  # [B]
    returns: Tensor  # [B]


def mlp_forward(x: Tensor, layers: list[Layer]) -> tuple[list[Tensor], Tensor]:
    """tanh hidden layers, linear output: (hidden activations, output)."""
    hidden = []
    for w, b in layers[:-1]:
        x = torch.addmm(b, x, w.t()).tanh_()
        hidden.append(x)
    w, b = layers[-1]
    return hidden, torch.addmm(b, x, w.t())


def mlp_backward(
    x: Tensor, hidden: list[Tensor], d_out: Tensor, layers: list[Layer], grads: list[Layer]
) -> None:
    """Backpropagate d loss / d output [B, out] and write each layer's gradients into
    `grads` (views into the flat gradient buffer) in place."""
    inputs = [x, *hidden]
    d = d_out
    for i in range(len(layers) - 1, -1, -1):
        (w, _), (g_w, g_b) = layers[i], grads[i]
        torch.mm(d.t(), inputs[i], out=g_w)
        torch.sum(d, 0, out=g_b)
        if i == 0:
            return
        h = inputs[i]  # this layer's input is the previous layer's tanh output
        d_h = d @ w
        d = d_h.addcmul_(d_h * h, h, value=-1.0)  # tanh' = 1 - h^2


def surrogate(
    new_logp: Tensor, mb: Minibatch, *, clip_coef: float, norm_adv: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(pg_loss, d pg_loss / d new_logp, approx_kl, clip_fraction).

    pg_loss = mean(max(-A r, -A clip(r, 1-c, 1+c))), r = exp(new_logp - old_logp). Where r
    lies inside the clip range both terms are equal and the slope is -A r / B; outside it
    the clipped term is constant, so a sample whose clipped term wins contributes nothing.
    """
    logratio = new_logp - mb.old_logp
    ratio = logratio.exp()
    adv = mb.advantages
    if norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    pg_loss = torch.maximum(pg1, pg2).mean()
    d_logp = torch.where(pg1 >= pg2, pg1, 0.0).div_(len(ratio))
    ratio_m1 = ratio - 1.0
    approx_kl = (ratio_m1 - logratio).mean()  # k3 estimator, as in ppo_loss
    clip_fraction = (ratio_m1.abs() > clip_coef).float().mean()
    return pg_loss, d_logp, approx_kl, clip_fraction


def value_loss(
    new_values: Tensor, mb: Minibatch, *, clip_coef: float, clip_vloss: bool
) -> tuple[Tensor, Tensor]:
    """(v_loss, d v_loss / d new_values) for 0.5 mean((v - R)^2), optionally clipped."""
    err = new_values - mb.returns
    n = len(err)
    if not clip_vloss:
        return 0.5 * err.square().mean(), err / n
    delta = new_values - mb.old_values
    err_clipped = mb.old_values + delta.clamp(-clip_coef, clip_coef) - mb.returns
    sq, sq_clipped = err.square(), err_clipped.square()
    # The larger branch carries the gradient; the clipped one only inside the clip range
    # (outside it is constant). Inside, both are equal up to rounding, so either may win.
    inside = delta.abs() <= clip_coef
    d_clipped = torch.where(inside, err_clipped, 0.0)
    d_values = torch.where(sq >= sq_clipped, err, d_clipped) / n
    return 0.5 * torch.maximum(sq, sq_clipped).mean(), d_values


def categorical(logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(logp of actions, entropy, log-probabilities [B, A], probabilities [B, A])."""
    logp_all = torch.log_softmax(logits, dim=-1)
    probs = logp_all.exp()
    logp = logp_all.gather(1, actions.unsqueeze(1)).squeeze(1)
    entropy = -(probs * logp_all).sum(-1)
    return logp, entropy, logp_all, probs


def categorical_backward(
    d_logp: Tensor,
    actions: Tensor,
    logp_all: Tensor,
    probs: Tensor,
    entropy: Tensor,
    d_entropy: float,
) -> Tensor:
    """d loss / d logits from d loss / d logp [B] and the per-sample d loss / d entropy.

    d logp_a / d z = onehot(a) - p;  d H / d z = -p * (log p + H)."""
    d_logits = probs * -d_logp.unsqueeze(1)
    d_logits.scatter_add_(1, actions.unsqueeze(1), d_logp.unsqueeze(1))
    if d_entropy:
        d_logits.addcmul_(probs, logp_all + entropy.unsqueeze(1), value=-d_entropy)
    return d_logits


def gaussian(mean: Tensor, log_std: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(logp of actions, entropy, (a - mean) / var) for a diagonal Gaussian."""
    var = torch.exp(2 * log_std)
    diff = actions - mean
    scaled = diff / var
    logp = (-0.5 * diff * scaled - log_std - _HALF_LOG_2PI).sum(-1)
    entropy = (0.5 + _HALF_LOG_2PI + log_std).sum().expand(len(mean))
    return logp, entropy, scaled


def gaussian_backward(
    d_logp: Tensor, actions: Tensor, mean: Tensor, scaled: Tensor, d_entropy_total: float
) -> tuple[Tensor, Tensor]:
    """(d loss / d mean [B, A], d loss / d log_std [A]).

    d logp / d mean = (a - mean) / var; d logp / d log_std = (a - mean)^2 / var - 1;
    every sample's entropy has slope 1 in each log_std."""
    d = d_logp.unsqueeze(1)
    d_mean = scaled * d
    d_log_std = (d * ((actions - mean) * scaled - 1.0)).sum(0) + d_entropy_total
    return d_mean, d_log_std


def _linear_layers(seq: nn.Sequential) -> tuple[list[Layer], list[Layer]]:
    linears = [m for m in seq if isinstance(m, nn.Linear)]
    return (
        [(m.weight.detach(), m.bias.detach()) for m in linears],
        [(m.weight.grad, m.bias.grad) for m in linears],
    )


class ActorCriticGradient:
    """Writes d loss / d parameters of an `ActorCritic` into its `.grad` tensors.

    The `.grad` tensors must already exist and stay put (FlatParameters makes them views
    into one buffer); each call overwrites them, so no zeroing is needed between steps.
    """

    def __init__(self, policy: ActorCritic) -> None:
        if any(p.grad is None for p in policy.parameters()):
            raise ValueError("ActorCriticGradient needs the gradient slots of FlatParameters")
        self.discrete = policy.discrete
        self.actor, self.actor_grads = _linear_layers(policy.actor)
        self.critic, self.critic_grads = _linear_layers(policy.critic)
        if not self.discrete:
            self.log_std = policy.log_std.detach()
            self.log_std_grad = policy.log_std.grad

    @torch.no_grad()
    def __call__(
        self,
        mb: Minibatch,
        *,
        clip_coef: float,
        vf_coef: float,
        ent_coef: float,
        clip_vloss: bool,
        norm_adv: bool,
    ) -> PPOLossStats:
        if norm_adv and len(mb.obs) < 2:
            raise ValueError("norm_adv needs a minibatch of at least 2 elements")
        x = mb.obs
        actor_hidden, out = mlp_forward(x, self.actor)
        critic_hidden, values = mlp_forward(x, self.critic)
        values = values.squeeze(1)
        n = len(x)

        if self.discrete:
            logp, entropy, logp_all, probs = categorical(out, mb.actions)
        else:
            logp, entropy, scaled = gaussian(out, self.log_std, mb.actions)
        pg_loss, d_logp, approx_kl, clip_fraction = surrogate(
            logp, mb, clip_coef=clip_coef, norm_adv=norm_adv
        )
        v_loss, d_values = value_loss(values, mb, clip_coef=clip_coef, clip_vloss=clip_vloss)

        if self.discrete:
            d_out = categorical_backward(
                d_logp, mb.actions, logp_all, probs, entropy, -ent_coef / n
            )
        else:
            d_out, d_log_std = gaussian_backward(d_logp, mb.actions, out, scaled, -ent_coef)
            self.log_std_grad.copy_(d_log_std)
        mlp_backward(x, actor_hidden, d_out, self.actor, self.actor_grads)
        mlp_backward(x, critic_hidden, d_values.mul_(vf_coef).unsqueeze(1), self.critic,
                     self.critic_grads)  # fmt: skip
        return PPOLossStats(
            policy_loss=pg_loss,
            value_loss=v_loss,
            entropy=entropy.mean(),
            approx_kl=approx_kl,
            clip_fraction=clip_fraction,
        )
