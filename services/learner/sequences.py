"""Whole per-env sequences of rollout batches, for recurrent policies (pure functions).

A recurrent policy is trained on each env's T steps in order, from the state the actor
started them from (the batch's `hidden_state`), with the state zeroed where an episode
starts, exactly as the actor stepped (proto/ROLLOUT.md, proto/WEIGHTS.md `lstm`).

The learner's other arrays are flat, time-major per batch and joined in batch order
(trainer.flatten_arrays); a recurrent update holds them as columns instead: one row per env
of every batch, [E, T, ...] (env-major, so that a minibatch is a gather of whole rows).
"""

from __future__ import annotations

import numpy as np

from ppomq.proto import RolloutBatch

__all__ = ["episode_starts", "from_rows", "sequence_arrays", "to_rows"]


def episode_starts(terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
    """[T, N] bool: True where step t begins an episode inside the batch, i.e. step t - 1
    ended (terminated or truncated). Step 0 is never one: the batch's hidden_state is
    already the state after any reset."""
    starts = np.zeros(terminated.shape, dtype=bool)
    np.logical_or(terminated[:-1], truncated[:-1], out=starts[1:])
    return starts


def _steps(batches: list[RolloutBatch]) -> int:
    steps = {b.num_steps for b in batches}
    if len(steps) != 1:  # the learner's rollout spec fixes T: a bug, not bad input
        raise ValueError(f"sequences need one T for all batches, got {sorted(steps)}")
    return steps.pop()


def to_rows(flat: np.ndarray, batches: list[RolloutBatch]) -> np.ndarray:
    """Per-step values in flatten_arrays' order ([sum of T*N, ...]) -> rows [E, T, ...]."""
    t, out, start = _steps(batches), [], 0
    for b in batches:
        n = b.num_envs
        out.append(np.swapaxes(flat[start : start + t * n].reshape(t, n, *flat.shape[1:]), 0, 1))
        start += t * n
    return np.ascontiguousarray(np.concatenate(out))


def from_rows(rows: np.ndarray, batches: list[RolloutBatch]) -> np.ndarray:
    """The inverse of to_rows: rows [E, T, ...] -> flatten_arrays' order."""
    out, start = [], 0
    for b in batches:
        n = b.num_envs
        block = np.swapaxes(rows[start : start + n], 0, 1)  # [T, n, ...]
        out.append(block.reshape(-1, *rows.shape[2:]))
        start += n
    return np.concatenate(out)


def sequence_arrays(batches: list[RolloutBatch]) -> dict[str, np.ndarray]:
    """The update's sequences as rows: obs, actions, logp, values [E, T, ...], starts
    [E, T] (episode_starts) and state [E, *H] (each row's hidden_state)."""
    _steps(batches)

    def rows(name: str) -> np.ndarray:
        return np.concatenate([np.swapaxes(b.arrays[name], 0, 1) for b in batches])

    out = {key: np.ascontiguousarray(rows(key)) for key in ("obs", "actions", "logp", "values")}
    out["starts"] = np.concatenate(
        [episode_starts(b.arrays["terminated"], b.arrays["truncated"]).T for b in batches]
    )
    out["state"] = np.concatenate([b.arrays["hidden_state"] for b in batches])
    return out
