"""Rollout message v1, encoding: one msgpack header frame, then one raw frame per array.

`encode` returns frames that reference the caller's arrays (send them with `copy=False`).
"""

from __future__ import annotations

from operator import index
from typing import Any

import msgpack
import numpy as np

from ppomq.proto.rollout_frames import to_frames, wants_frames
from ppomq.proto.rollout_types import CACHE_LIMIT, ROLLOUT_SCHEMA, WIRE_NAMES, RolloutBatch

# One shared Packer saves building one per call. Its `pack` runs in C without calling back
# into Python (no `default`), so under the GIL no other thread can interleave with it.
_packb = msgpack.Packer(use_bin_type=True).pack
# Packed array tables by (name, dtype, shape) of every array: an actor sends the same table
# every time, and packing it is most of the cost of packing the header.
_TABLE_CACHE: dict[tuple[tuple[str, np.dtype, tuple[int, ...]], ...], bytes] = {}
_ARRAYS_KEY = _packb("arrays")
_EPISODES_KEY = _packb("episodes")


def _wire_array(arr: np.ndarray) -> np.ndarray:
    """C-contiguous little-endian, as the wire wants (this one copies)."""
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))


def _np_scalar(obj: Any) -> Any:
    """msgpack `default`: numpy scalars (np.float32 returns, np.int64 lengths) as Python's."""
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot put {type(obj).__name__} in a rollout header")


def _pack_table(key: tuple[tuple[str, np.dtype, tuple[int, ...]], ...]) -> bytes:
    table = []
    for name, dtype, shape in key:
        wire = WIRE_NAMES.get(dtype)
        if wire is None:
            raise ValueError(f"array {name!r}: dtype {dtype} is not a wire dtype")
        table.append({"name": name, "dtype": wire, "shape": list(shape)})
    if len(_TABLE_CACHE) >= CACHE_LIMIT:
        _TABLE_CACHE.clear()
    packed = _TABLE_CACHE[key] = msgpack.packb(table, use_bin_type=True)
    return packed


def encode(batch: RolloutBatch, *, frames: bool | None = None) -> list[Any]:
    """Frames for one batch: the packed header, then the arrays themselves (no copy).

    Send with `socket.send_multipart(frames, copy=False)`; do not mutate the arrays until
    ZeroMQ has sent them (the actor allocates fresh arrays for every rollout for this reason).

    `frames`: send a stacked `obs` [T, N, S, *F] as the frames layout (1.2: `frames` and
    `obs_frames` in its place, each frame once; those two are new arrays). None (default):
    when `wants_frames` says so (uint8 stacks such as Atari's); False: `obs` as it is.
    """
    arrays = batch.arrays
    obs = arrays.get("obs")
    if (
        frames is not False
        and type(obs) is np.ndarray
        and "frames" not in arrays
        and (frames or wants_frames(obs))
    ):
        if obs.ndim < 4:
            raise ValueError(f"frames layout: obs {obs.shape} is not [T, N, S, *F]")
        stack, index_ = to_frames(obs)
        laid: dict[str, np.ndarray] = {}
        for name, arr in arrays.items():  # in obs's place, so frame order stays the table's
            if name == "obs":
                laid["frames"], laid["obs_frames"] = stack, index_
            else:
                laid[name] = arr
        arrays = laid
    out: list[Any] = [b""]
    key = []
    for name, arr in arrays.items():
        if type(arr) is not np.ndarray or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        if arr.dtype not in WIRE_NAMES:
            arr = _wire_array(arr)  # big-endian input: the one case that copies
        out.append(arr)
        key.append((name, arr.dtype, arr.shape))
    tkey = tuple(key)
    table = _TABLE_CACHE.get(tkey) or _pack_table(tkey)
    ep = batch.episodes
    # A msgpack map is a count and then key/value pairs, so the header is the 9 (10 with
    # `sent`) scalar fields packed as a map (count byte raised by 2), then the two big values.
    scalars = {
        "schema": ROLLOUT_SCHEMA,
        "run_id": batch.run_id,
        "actor_id": batch.actor_id,
        # index(): numpy integers are welcome, floats are not
        "seq": index(batch.seq),
        "policy_version": index(batch.policy_version),
        "created_ns": index(batch.created_ns),
        "env_id": batch.env_id,
        "num_envs": index(batch.num_envs),
        "num_steps": index(batch.num_steps),
    }
    if batch.sent is not None:
        scalars["sent"] = index(batch.sent)
    if batch.weights_wait is not None:
        scalars["weights_wait"] = float(batch.weights_wait)
    head = _packb(scalars)
    episodes_map = {"returns": ep.returns, "lengths": ep.lengths}
    try:
        episodes = _packb(episodes_map)
    except TypeError:  # numpy scalars in the lists: the slower packer that converts them
        episodes = msgpack.packb(episodes_map, use_bin_type=True, default=_np_scalar)
    out[0] = b"".join(
        (bytes((head[0] + 2,)), memoryview(head)[1:], _ARRAYS_KEY, table, _EPISODES_KEY, episodes)
    )
    return out
