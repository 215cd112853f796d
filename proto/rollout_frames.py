"""Rollout message 1.2, the frames layout: each frame of a stacked observation on the wire once.

A stacked observation `obs` [T, N, S, *F] (S frames of shape F, oldest first, as Gymnasium's
FrameStackObservation gives them) is sent as `frames` [K, *F], the batch's distinct frames,
and `obs_frames` int32 [T, N, S], the indices of each step's stack into `frames`; the
receiver rebuilds `obs = frames[obs_frames]` with one gather (ROLLOUT.md "Frames layout").

`to_frames` finds the frames by content, so it is right whatever the wrappers did: a stack
whose first S-1 frames equal, byte for byte, the previous step's last S-1 frames of the same
env reuses their indices and adds one frame; any other stack (the batch's first step, a
reset) adds its frames, a run of equal neighbours (a reset fills the stack with one frame)
once. Frames shared across envs are not looked for.
"""

from __future__ import annotations

import numpy as np

MAX_STACK = 8  # the largest S the encoder sends as frames on its own (`wants_frames`)
_I32 = np.dtype("<i4")


def wants_frames(obs: np.ndarray) -> bool:
    """The encoder's rule: a uint8 `obs` [T, N, S, *F] with F of rank ≥ 2 and 2 ≤ S ≤ 8
    (Atari's [4, 84, 84]) goes as frames; anything else as `obs`."""
    return (
        obs.dtype == np.uint8 and obs.ndim >= 5 and 2 <= obs.shape[2] <= MAX_STACK and obs.size > 0
    )


def to_frames(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(frames [K, *F], obs_frames int32 [T, N, S]) with frames[obs_frames] == obs exactly."""
    t_steps, n, s = obs.shape[:3]
    fshape = obs.shape[3:]
    obs = np.ascontiguousarray(obs)
    fbytes = int(np.prod(fshape, dtype=np.int64)) * obs.dtype.itemsize
    # Compare stacks as rows of bytes, 8 at a time where a frame's bytes allow it.
    rows = obs.reshape(t_steps, n, s * fbytes // obs.dtype.itemsize).view(np.uint8)
    word = np.uint64 if fbytes % 8 == 0 else np.uint8
    wide = rows.view(word)
    per = fbytes // np.dtype(word).itemsize  # words per frame
    out = np.empty((t_steps * n * s, *fshape), obs.dtype)  # only what is written is touched
    flat_obs = obs.reshape(t_steps, n, s, -1)
    flat_out = out.reshape(t_steps * n * s, -1)
    idx = np.empty((t_steps, n, s), _I32)
    k = 0
    for t in range(t_steps):
        if t == 0:
            cont = np.zeros(n, bool)
        else:
            # stack[t][:-1] == stack[t-1][1:], per env
            cont = (wide[t, :, : (s - 1) * per] == wide[t - 1, :, per:]).all(axis=1)
        go = np.flatnonzero(cont)
        if go.size:
            m = go.size
            idx[t, go, :-1] = idx[t - 1, go, 1:]
            idx[t, go, -1] = np.arange(k, k + m, dtype=_I32)
            flat_out[k : k + m] = flat_obs[t, go, -1]
            k += m
        for i in np.flatnonzero(~cont):
            stack = wide[t, i].reshape(s, per)
            for j in range(s):
                if j and np.array_equal(stack[j], stack[j - 1]):
                    idx[t, i, j] = idx[t, i, j - 1]
                else:
                    flat_out[k] = flat_obs[t, i, j]
                    idx[t, i, j] = k
                    k += 1
    return out[:k], idx


def rebuild(frames: np.ndarray, obs_frames: np.ndarray) -> np.ndarray:
    """obs [T, N, S, *F] from a checked frames layout: one gather."""
    return np.take(frames, obs_frames, axis=0)
