"""Rollout message v1, the types: schema, wire dtypes and limits, the spec a learner accepts
(`RolloutSpec`, `ActionSpace`), the batch (`RolloutBatch`, `EpisodeStats`) and `SeqTracker`.

The codec is `rollout_encode` and `rollout_decode`; the package `ppomq.proto` exports the public
names.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ppomq.proto.errors import DecodeError, Reason

ROLLOUT_SCHEMA = "ppomq.rollout/1.4"
ROLLOUT_FAMILY = "ppomq.rollout"
# 1.1: optional `sent`; 1.2: the frames layout; 1.3: optional `scores` and `episode_ends`;
# 1.4: optional `weights_wait`
ROLLOUT_MAJOR, ROLLOUT_MINOR = 1, 4

# The wire dtypes. All multi-byte types are little-endian on the wire.
ALLOWED_DTYPES: frozenset[str] = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}
)
FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})
NP_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in ALLOWED_DTYPES}
WIRE_DTYPES: dict[str, np.dtype] = dict(NP_DTYPES)  # wire name -> little-endian numpy dtype
# dtype object -> wire name, for arrays already in wire byte order. `arr.dtype.name` costs
# microseconds per call; a dict lookup on the dtype object is ~50 ns and also rejects
# big-endian and non-wire dtypes in the same step.
WIRE_NAMES: dict[np.dtype, str] = {dt: name for name, dt in NP_DTYPES.items()}

MAX_HEADER_BYTES = 1 << 20  # 1 MiB: episodes lists make the header grow with T*N
MAX_RANK = 8
MAX_DIM = 1 << 31
DEFAULT_MAX_BYTES = 256 << 20
MAX_ID_LEN = 256
MAX_ACTORS_TRACKED = 1 << 16
# Entries in each of the codec's caches (encode's packed tables, decode's plans).
CACHE_LIMIT = 256

_SCHEMA_RE = re.compile(r"([a-z0-9_.]{1,64})/([0-9]{1,6})\.([0-9]{1,6})", re.ASCII)


def parse_schema(schema: str) -> tuple[str, int, int]:
    """'ppomq.rollout/1.0' -> ('ppomq.rollout', 1, 0); anything else is SCHEMA_UNKNOWN."""
    m = _SCHEMA_RE.fullmatch(schema) if type(schema) is str else None
    if m is None:
        raise DecodeError(Reason.SCHEMA_UNKNOWN, f"schema {str(schema)[:64]!r} is not family/M.m")
    return m.group(1), int(m.group(2)), int(m.group(3))


@dataclass(frozen=True, slots=True)
class ActionSpace:
    """The action space the learner trains: `discrete` (n choices) or `continuous` (a box).

    A box has one bound per element: `low` and `high` hold prod(shape) floats each,
    flattened in C order (last index fastest), as Gymnasium's `Box.low.ravel()` gives
    them; -inf/+inf, or None for the whole side, leave an element unbounded. `box()`
    builds one from scalars or arrays. Bounds are enforced on received actions only when
    `enforce_bounds`: Gaussian policies send the unclipped sample (its log-prob is what
    the ratio needs) and the actor clips what the env gets instead.
    """

    kind: Literal["discrete", "continuous"]
    n: int = 0
    shape: tuple[int, ...] = ()
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    enforce_bounds: bool = False
    # The bounds as float64 arrays [prod(shape)] for decode's check; None where a side is
    # unbounded everywhere (nothing to compare).
    _low: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _high: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size = math.prod(self.shape)
        sides = {}
        for side in ("low", "high"):
            value = getattr(self, side)
            if value is None:
                sides[side] = None
                continue
            if self.kind != "continuous":
                raise ValueError(f"ActionSpace: {side} is for continuous spaces only")
            if not isinstance(value, (tuple, list)):
                raise TypeError(
                    f"ActionSpace: {side} must be a tuple of {size} floats (C order); "
                    "use ActionSpace.box() for a scalar or an array"
                )
            value = tuple(float(v) for v in value)
            if len(value) != size:
                raise ValueError(
                    f"ActionSpace: {side} has {len(value)} bounds for shape {self.shape} "
                    f"({size} elements)"
                )
            if any(math.isnan(v) for v in value):
                raise ValueError(f"ActionSpace: {side} has a NaN bound")
            object.__setattr__(self, side, value)
            arr = np.array(value, dtype=np.float64)
            unbounded = -math.inf if side == "low" else math.inf
            sides[side] = None if (arr == unbounded).all() else arr
        low, high = sides["low"], sides["high"]
        if low is not None and high is not None and (low > high).any():
            i = int(np.flatnonzero(low > high)[0])
            raise ValueError(f"ActionSpace: element {i} has low {low[i]} > high {high[i]}")
        object.__setattr__(self, "_low", low)
        object.__setattr__(self, "_high", high)

    @classmethod
    def box(
        cls,
        shape: Sequence[int],
        low: float | np.ndarray | Sequence[float] | None,
        high: float | np.ndarray | Sequence[float] | None,
        *,
        enforce_bounds: bool = False,
    ) -> ActionSpace:
        """A continuous space; a scalar bound applies to every element, an array (of
        `shape`, or already flat) is flattened in C order."""
        shape = tuple(int(d) for d in shape)

        def flat(bound: Any) -> tuple[float, ...] | None:
            if bound is None:
                return None
            arr = np.broadcast_to(np.asarray(bound, dtype=np.float64), shape)
            return tuple(arr.ravel().tolist())

        return cls("continuous", shape=shape, low=flat(low), high=flat(high),
                   enforce_bounds=enforce_bounds)  # fmt: skip

    def bounds(self, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) as arrays of `shape` (-inf/+inf where unbounded), e.g. for np.clip."""
        low = np.full(self.shape, -np.inf, dtype) if self.low is None else None
        high = np.full(self.shape, np.inf, dtype) if self.high is None else None
        if low is None:
            low = np.array(self.low, dtype).reshape(self.shape)
        if high is None:
            high = np.array(self.high, dtype).reshape(self.shape)
        return low, high


@dataclass(frozen=True, slots=True)
class RolloutSpec:
    """What a learner accepts; `decode` checks every message against it."""

    run_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    action: ActionSpace
    num_steps: int
    num_envs: int | None = None  # None: any N in 1..max_envs
    env_id: str | None = None  # None: not checked
    hidden_shape: tuple[int, ...] | None = None  # recurrent policies only
    max_envs: int = 4096
    max_bytes: int = DEFAULT_MAX_BYTES

    def expected_arrays(self, n: int) -> dict[str, tuple[str, tuple[int, ...], bool]]:
        """name -> (dtype, shape, required) for a batch of N = n envs.

        `obs` is required unless the batch uses the frames layout (`frames` and
        `obs_frames`, for observations of rank >= 2); a -1 in a shape is the batch's own."""
        t = self.num_steps
        if self.action.kind == "discrete":
            act = ("int64", (t, n), True)
        else:
            act = ("float32", (t, n, *self.action.shape), True)
        arrays = {
            "obs": (self.obs_dtype, (t, n, *self.obs_shape), True),
            "actions": act,
            "logp": ("float32", (t, n), True),
            "values": ("float32", (t, n), True),
            "rewards": ("float32", (t, n), True),
            "terminated": ("bool", (t, n), True),
            "truncated": ("bool", (t, n), True),
            "final_values": ("float32", (t, n), True),
            "bootstrap_value": ("float32", (n,), True),
            "bootstrap_obs": (self.obs_dtype, (n, *self.obs_shape), False),
            # 1.3: what the episode figures are summed from and where they end, when the
            # training rewards and done flags are not those (ROLLOUT.md "Episodes").
            "scores": ("float32", (t, n), False),
            "episode_ends": ("bool", (t, n), False),
        }
        if len(self.obs_shape) >= 2:
            # 1.2, the frames layout (instead of `obs`): `frames` [K, *F] with K the
            # batch's own (-1 here; 1 <= K <= T*N*S), `obs_frames` [T, N, S].
            s, fshape = self.obs_shape[0], self.obs_shape[1:]
            arrays["frames"] = (self.obs_dtype, (-1, *fshape), False)
            arrays["obs_frames"] = ("int32", (t, n, s), False)
        if self.hidden_shape is not None:
            arrays["hidden_state"] = ("float32", (n, *self.hidden_shape), True)
        return arrays


@dataclass(slots=True)
class EpisodeStats:
    """Episodes that ended inside the batch: undiscounted return and length of each."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


@dataclass(slots=True)
class RolloutBatch:
    """One actor's T steps of N envs, as sent (arrays in frame order)."""

    run_id: str
    actor_id: str
    seq: int
    policy_version: int
    env_id: str
    num_envs: int
    num_steps: int
    arrays: dict[str, np.ndarray]
    episodes: EpisodeStats = field(default_factory=EpisodeStats)
    created_ns: int = 0
    nbytes: int = 0
    # Batches this actor incarnation has sent, this one included (1.1, optional): the
    # learner's rollout ledger compares it with what it received. None: not carried.
    sent: int | None = None
    # The actor's share of its time since its previous batch spent waiting for weights
    # (1.4, optional, informative): `ppomq status` says from it which side binds.
    weights_wait: float | None = None
    # Not on the wire: the episodes the receiver derived from the batch's own rewards (or
    # scores) and episode ends, where it saw each from its start; None until checked.
    verified: EpisodeStats | None = None
    unverified: int = 0  # episodes that ended here whose start the receiver did not see


class SeqTracker:
    """Last accepted `seq` per actor_id, bounded (least recently seen actors forgotten).

    `decode` only checks against it; whoever accepts a batch (the learner, once the batch
    passed its staleness gate too) records its `seq`, so a refused batch changes nothing.
    One thread records; others may check meanwhile (each call is one dict operation)."""

    def __init__(self, max_actors: int = MAX_ACTORS_TRACKED) -> None:
        self._last: OrderedDict[str, int] = OrderedDict()
        self._max = max_actors

    def check(self, actor_id: str, seq: int) -> None:
        """Raise SEQ_NOT_INCREASING unless `seq` is above the last one recorded."""
        last = self._last.get(actor_id)
        if last is not None and seq <= last:
            raise DecodeError(Reason.SEQ_NOT_INCREASING, f"{actor_id}: seq {seq} after {last}")

    def record(self, actor_id: str, seq: int) -> None:
        """Remember an accepted `seq`."""
        self._last[actor_id] = seq
        self._last.move_to_end(actor_id)
        if len(self._last) > self._max:
            self._last.popitem(last=False)

    def forget(self, actor_id: str) -> None:
        """Drop an actor the learner no longer keeps state for (bounded per-actor state)."""
        self._last.pop(actor_id, None)

    def __len__(self) -> int:
        return len(self._last)
