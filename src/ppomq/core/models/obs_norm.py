"""Observation normalization by running mean and variance, part of the model.

The statistics are buffers of the model, so they travel in every weights message with
the parameters: each actor normalizes exactly as the learner did for that version, and an
exported file or `ppomq eval` needs nothing else. The learner alone updates them, from the
raw observations of the batches it trained on, after the update (so a version's
statistics are the ones its actors acted with, and the ones its update trained with).
Formulas and initial values are Gymnasium's NormalizeObservation / RunningMeanStd, which
CleanRL's ppo_continuous_action uses: mean 0, var 1, count 1e-4, then Chan et al.'s
parallel merge of batch moments; y = clip((x - mean) / sqrt(var + eps), -clip, clip).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ppomq.core.models.spec import ModelSpecError


def check_obs_norm(spec: dict[str, Any]) -> None:
    """A model spec's `obs_norm`: null, absent, or {"clip": number, "epsilon": number}."""
    norm = spec.get("obs_norm")
    if norm is not None and not (
        isinstance(norm, dict)
        and all(isinstance(norm.get(k), int | float) for k in ("clip", "epsilon"))
    ):
        raise ModelSpecError("obs_norm must be null or a map with numbers clip and epsilon")


class ObsNormalizer(nn.Module):
    """Buffers `mean` [D], `var` [D] and `count` [] in float64 (a float32 count would stop
    moving the statistics after some 10^7 samples)."""

    def __init__(self, dim: int, *, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.epsilon = float(clip), float(epsilon)
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    def scale_shift(self) -> tuple[Tensor, Tensor]:
        """(1 / sqrt(var + eps), mean) in float32: y = clip((x - mean) * inv_std)."""
        inv_std = torch.rsqrt(self.var + self.epsilon)
        return inv_std.float(), self.mean.float()

    def forward(self, x: Tensor) -> Tensor:
        inv_std, mean = self.scale_shift()
        return ((x - mean.to(x.dtype)) * inv_std.to(x.dtype)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge the moments of a batch of raw observations [B, D]. Pixels (uint8) take
        their moments in float32, exact enough for values below 256 and half the memory of
        float64 over an Atari batch (1,024 x 28,224)."""
        x = x.to(torch.float32 if x.dtype == torch.uint8 else torch.float64)
        self.merge(float(len(x)), x.mean(0), x.var(0, unbiased=False))

    @torch.no_grad()
    def merge(self, n: float, batch_mean: Tensor, batch_var: Tensor) -> None:
        """Merge the moments (count, mean, biased variance) of `n` raw observations: one
        batch's, or a learner group's batches' together."""
        batch_mean, batch_var = batch_mean.to(self.mean), batch_var.to(self.var)
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
