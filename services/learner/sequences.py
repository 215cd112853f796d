"""Whole per-env sequences of rollout batches, for recurrent policies (pure functions).

A recurrent policy is trained on each env's T steps in order, from the state the actor
started them from (the batch's `hidden_state`), with the state zeroed where an episode
starts, exactly as the actor stepped (proto/ROLLOUT.md, proto/WEIGHTS.md `lstm`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["episode_starts"]


def episode_starts(terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
    """[T, N] bool: True where step t begins an episode inside the batch, i.e. step t - 1
    ended (terminated or truncated). Step 0 is never one: the batch's hidden_state is
    already the state after any reset."""
    starts = np.zeros(terminated.shape, dtype=bool)
    np.logical_or(terminated[:-1], truncated[:-1], out=starts[1:])
    return starts
