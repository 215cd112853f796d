"""Return normalization (`--norm-returns`, Sample Factory's `normalize_returns`): the value
head learns returns on the scale of their running mean and std, whatever the rewards' scale.

The learner alone holds the statistics; the model and the weights do not change. The
actors' values are the value head's outputs, so they are normalized: the learner maps them
back to returns (`denormalize`) to compute the targets, merges the targets' moments into the
statistics, and trains the value head on the targets mapped forward (`normalize`) with the
statistics that now include them, in that order, as Sample Factory's learner does. The
statistics are ObsNormalizer's over one dimension with Sample Factory's clip (5) and epsilon
(1e-5); denormalizing clips first, as Sample Factory's does.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ppomq.core.models.obs_norm import ObsNormalizer

__all__ = ["ReturnNormalizer"]


class ReturnNormalizer(ObsNormalizer):
    """Running mean, variance and count of value targets; `normalize` is the module's call."""

    def __init__(self) -> None:
        super().__init__(1, clip=5.0, epsilon=1e-5)

    def normalize(self, returns: Tensor) -> Tensor:
        """Value targets [B] on the statistics' scale, clipped to +-5, in their own dtype."""
        return self(returns.unsqueeze(1)).squeeze(1)

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        """The value head's outputs as returns: clip(v, -5, 5) * sqrt(var + eps) + mean,
        in the values' dtype."""
        std = float(torch.sqrt(self.var + self.epsilon))
        mean = float(self.mean)
        out = np.clip(values, -self.clip, self.clip) * std + mean
        return out.astype(values.dtype, copy=False)

    @staticmethod
    def moments(returns: np.ndarray) -> Tensor:
        """(count, sum, sum of squares) of value targets in float64: what a learner group
        sums over its ranks before `merge_moments`."""
        r = returns.astype(np.float64)
        return torch.tensor([len(r), r.sum(), np.square(r).sum()], dtype=torch.float64)

    def merge_moments(self, sums: Tensor) -> None:
        """Merge (count, sum, sum of squares) of value targets into the statistics."""
        n, s, ss = (float(x) for x in sums)
        if n == 0:
            return
        mean = s / n
        var = max(ss / n - mean * mean, 0.0)
        self.merge(n, torch.tensor([mean]), torch.tensor([var]))
