"""Action distributions: sampling, log-probabilities, entropy and the mode, written once.

The actor's fast inference, the learner's objective (through autograd) and greedy
evaluation all call these, so the policy an actor samples from is by construction the
one the learner differentiates. A distribution is stateless; its parameters (`head`)
come from the network: logits for `Categorical`, (mean, log_std) for `DiagGaussian`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Categorical:
    """Softmax over `n` logits; actions are int64 indices of shape [B]."""

    discrete = True

    def __init__(self, n: int) -> None:
        self.n = n

    def sample(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """(action [B], logp [B]). Gumbel-max: one fused op, no torch.distributions
        object per step (the actor samples at every env step)."""
        logp_all = torch.log_softmax(logits, dim=-1)
        gumbel = -torch.log(-torch.log(torch.rand_like(logp_all).clamp_(1e-20, 1.0)))
        action = torch.argmax(logp_all + gumbel, dim=-1)
        return action, logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def log_prob_entropy(self, logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """(logp of `actions` [B], entropy [B])."""
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        return logp, -(logp_all.exp() * logp_all).sum(-1)

    def mode(self, logits: Tensor) -> Tensor:
        return logits.argmax(-1)


class DiagGaussian:
    """Independent normals with a state-independent log std (CleanRL's
    ppo_continuous_action); actions have shape [B, *action_shape]. The log-probability is
    that of the sampled, unclipped action: only the env sees it clipped to its bounds."""

    discrete = False

    def __init__(self, action_shape: tuple[int, ...]) -> None:
        self.action_shape = tuple(action_shape)
        self.dim = math.prod(self.action_shape)

    def sample(self, head: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        mean, log_std = head
        action = mean + log_std.exp() * torch.randn_like(mean)
        return action.reshape(-1, *self.action_shape), _normal_logp(action, mean, log_std)

    def log_prob_entropy(
        self, head: tuple[Tensor, Tensor], actions: Tensor
    ) -> tuple[Tensor, Tensor]:
        mean, log_std = head
        logp = _normal_logp(actions.reshape(len(mean), self.dim), mean, log_std)
        entropy = (0.5 + _HALF_LOG_2PI + log_std).sum().expand(len(mean))
        return logp, entropy

    def mode(self, head: tuple[Tensor, Tensor]) -> Tensor:
        return head[0].reshape(-1, *self.action_shape)


def _normal_logp(x: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """Sum over the action's elements of the normal log-density; x and mean are [B, A]."""
    z = (x - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(-1)


ActionDistribution = Categorical | DiagGaussian


def distribution_for(action: dict[str, Any]) -> ActionDistribution:
    """The distribution a model spec's `action` map names."""
    if action["kind"] == "categorical":
        return Categorical(int(action["n"]))
    return DiagGaussian(tuple(int(d) for d in action["shape"]))
