"""What every registered actor-critic shares: the objective's and the actor's use of
`forward` (distribution parameters, value) and its action distribution `self.dist`."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class ActorCritic(nn.Module):
    """Subclasses define `preprocess`, `forward` and `dist`."""

    def evaluate(self, x: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(logp of `actions`, entropy, value) for preprocessed inputs, with grad: what the
        learner's objective differentiates."""
        head, value = self(x)
        logp, entropy = self.dist.log_prob_entropy(head, actions)
        return logp, entropy, value

    @torch.no_grad()
    def act(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        head, value = self(self.preprocess(obs))
        action, logp = self.dist.sample(head)
        return action, logp, value
