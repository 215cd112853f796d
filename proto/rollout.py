"""Rollout message v1: one msgpack header frame, then one raw frame per array (ROLLOUT.md).

`encode` returns frames that reference the caller's arrays (send them with `copy=False`);
`decode` checks a received message against what the learner expects and returns numpy
views over the received frames, never copies. Every failure is one `DecodeError`.

The decoder is on the learner's hot path (one call per batch), so the per-message work is
kept to one msgpack call, one comparison of the header's array table against the table
last accepted for the same spec and N (a cached "plan"), and one numpy reduction per array.
The full, reason-by-reason check (`_plan_for`) runs only when the table differs; both paths
raise the same reason for the same message.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import index
from typing import Any, Literal

import msgpack
import numpy as np

from .errors import DecodeError, Reason

ROLLOUT_SCHEMA = "ppomq.rollout/1.1"
ROLLOUT_FAMILY = "ppomq.rollout"
ROLLOUT_MAJOR, ROLLOUT_MINOR = 1, 1  # 1.1: optional `sent`

# The wire dtypes. All multi-byte types are little-endian on the wire.
ALLOWED_DTYPES: frozenset[str] = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}
)
_FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})
_NP_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in ALLOWED_DTYPES}
WIRE_DTYPES: dict[str, np.dtype] = dict(_NP_DTYPES)  # wire name -> little-endian numpy dtype
# dtype object -> wire name, for arrays already in wire byte order. `arr.dtype.name` costs
# microseconds per call; a dict lookup on the dtype object is ~50 ns and also rejects
# big-endian and non-wire dtypes in the same step.
_WIRE_NAMES: dict[np.dtype, str] = {dt: name for name, dt in _NP_DTYPES.items()}

MAX_HEADER_BYTES = 1 << 20  # 1 MiB: episodes lists make the header grow with T*N
MAX_RANK = 8
MAX_DIM = 1 << 31
DEFAULT_MAX_BYTES = 256 << 20
MAX_ID_LEN = 256
MAX_ACTORS_TRACKED = 1 << 16

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
        """name -> (dtype, shape, required) for a batch of N = n envs."""
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
        }
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


# --------------------------------------------------------------------------- encode

# One shared Packer saves building one per call. Its `pack` runs in C without calling back
# into Python (no `default`), so under the GIL no other thread can interleave with it.
_packb = msgpack.Packer(use_bin_type=True).pack
# Packed array tables by (name, dtype, shape) of every array: an actor sends the same table
# every time, and packing it is most of the cost of packing the header.
_TABLE_CACHE: dict[tuple[tuple[str, np.dtype, tuple[int, ...]], ...], bytes] = {}
_CACHE_LIMIT = 256
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
        wire = _WIRE_NAMES.get(dtype)
        if wire is None:
            raise ValueError(f"array {name!r}: dtype {dtype} is not a wire dtype")
        table.append({"name": name, "dtype": wire, "shape": list(shape)})
    if len(_TABLE_CACHE) >= _CACHE_LIMIT:
        _TABLE_CACHE.clear()
    packed = _TABLE_CACHE[key] = msgpack.packb(table, use_bin_type=True)
    return packed


def encode(batch: RolloutBatch) -> list[Any]:
    """Frames for one batch: the packed header, then the arrays themselves (no copy).

    Send with `socket.send_multipart(frames, copy=False)`; do not mutate the arrays until
    ZeroMQ has sent them (the actor allocates fresh arrays for every rollout for this reason).
    """
    frames: list[Any] = [b""]
    key = []
    for name, arr in batch.arrays.items():
        if type(arr) is not np.ndarray or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        if arr.dtype not in _WIRE_NAMES:
            arr = _wire_array(arr)  # big-endian input: the one case that copies
        frames.append(arr)
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
    head = _packb(scalars)
    episodes_map = {"returns": ep.returns, "lengths": ep.lengths}
    try:
        episodes = _packb(episodes_map)
    except TypeError:  # numpy scalars in the lists: the slower packer that converts them
        episodes = msgpack.packb(episodes_map, use_bin_type=True, default=_np_scalar)
    frames[0] = b"".join(
        (bytes((head[0] + 2,)), memoryview(head)[1:], _ARRAYS_KEY, table, _EPISODES_KEY, episodes)
    )
    return frames


# --------------------------------------------------------------------------- decode

# What decode does with each array's bytes (ROLLOUT.md "Content checks").
_SKIP, _PLAIN, _FINITE, _FINITE16, _BOOL, _DISCRETE, _BOX = range(7)


@dataclass(slots=True)
class _Plan:
    """A validated array table for one (spec, N, newer-minor): how to view each frame."""

    spec: RolloutSpec
    table: list[Any]  # the header's `arrays` value, exactly as accepted
    sizes: list[int]  # expected byte count of frames 1..k
    # (name, dtype to view the frame as, shape, check kind) per frame
    steps: list[tuple[str, np.dtype, tuple[int, ...], int]]


_PLANS: dict[tuple[int, int, bool], _Plan] = {}
_umax = np.maximum.reduce  # the ufunc itself: ndarray.max() adds a Python-level wrapper
_umin = np.minimum.reduce
_I64 = _NP_DTYPES["int64"]


def _fail(reason: Reason, detail: str) -> DecodeError:
    return DecodeError(reason, detail)


def decode(
    frames: Sequence[Any], spec: RolloutSpec, seqs: SeqTracker | None = None
) -> RolloutBatch:
    """Check a received message against `spec` and return it as a batch of views.

    Checks run in the order ROLLOUT.md gives, so each bad message has one defined reason.
    With `seqs`, `seq` must be above the last one recorded for its actor_id; decode never
    records one: the caller does (`seqs.record`) once it accepts the batch.
    """
    try:
        return _decode(frames, spec, seqs)
    except DecodeError:
        raise
    except Exception as exc:  # the promise: nothing but DecodeError leaves decode
        raise DecodeError(
            Reason.HEADER_INVALID, f"malformed message: {type(exc).__name__}"
        ) from None


def _header_fields(h: dict[str, Any]) -> None:
    """Raise HEADER_INVALID naming the first bad field (the slow path of the fused check)."""
    for key, kind, lo in _FIELDS:
        value = h.get(key)
        # `type(x) is int` rejects bool, which msgpack would otherwise let through as an int.
        if type(value) is not kind:
            raise _fail(Reason.HEADER_INVALID, f"{key} must be {kind.__name__}")
        if kind is str and len(value) > MAX_ID_LEN:
            raise _fail(Reason.HEADER_INVALID, f"{key} longer than {MAX_ID_LEN}")
        if lo is not None and value < lo:
            raise _fail(Reason.HEADER_INVALID, f"{key} must be >= {lo}")
    raise _fail(Reason.HEADER_INVALID, "header fields")  # unreachable unless _FIELDS drifts


_FIELDS: tuple[tuple[str, type, int | None], ...] = (
    ("run_id", str, None),
    ("actor_id", str, None),
    ("seq", int, 0),
    ("policy_version", int, 0),
    ("created_ns", int, 0),
    ("env_id", str, None),
    ("num_envs", int, 1),
    ("num_steps", int, 1),
    ("arrays", list, None),
    ("episodes", dict, None),
)


def _episodes(raw: dict[str, Any], limit: int) -> EpisodeStats:
    returns, lengths = raw.get("returns"), raw.get("lengths")
    if type(returns) is not list or type(lengths) is not list:
        raise _fail(Reason.EPISODES_INVALID, "episodes.returns and .lengths must be lists")
    if len(returns) != len(lengths) or len(returns) > limit:
        raise _fail(Reason.EPISODES_INVALID, "episodes lists differ in length or exceed T*N")
    if not returns:
        return EpisodeStats([], [])
    rtypes = set(map(type, returns))
    # sum() of finite floats can overflow to inf; only then is the exact per-item test run.
    if not rtypes <= {float, int} or not (
        math.isfinite(sum(returns)) or all(math.isfinite(r) for r in returns)
    ):
        raise _fail(Reason.EPISODES_INVALID, "episode return must be a finite number")
    if set(map(type, lengths)) != {int} or min(lengths) < 1:
        raise _fail(Reason.EPISODES_INVALID, "episode length must be an int >= 1")
    if int in rtypes:
        returns = [float(r) for r in returns]
    return EpisodeStats(returns, lengths)


def _decode(frames: Sequence[Any], spec: RolloutSpec, seqs: SeqTracker | None) -> RolloutBatch:
    # 1. frames and size, before anything is parsed
    nframes = len(frames)
    if nframes < 2:
        raise _fail(Reason.FRAME_COUNT, f"{nframes} frames; a batch has a header and arrays")
    sizes = [memoryview(f).nbytes for f in frames]
    total = sum(sizes)
    if total > spec.max_bytes:
        raise _fail(Reason.OVERSIZE, f"{total} bytes > cap {spec.max_bytes}")
    if sizes[0] > MAX_HEADER_BYTES:
        raise _fail(Reason.OVERSIZE, f"header of {sizes[0]} bytes > {MAX_HEADER_BYTES}")
    # 2. header: msgpack map, schema
    try:
        h = msgpack.unpackb(frames[0])  # msgpack 1.x: raw=False, strict_map_key=True
    except Exception as exc:  # msgpack raises several unrelated types
        raise _fail(Reason.HEADER_NOT_MSGPACK, type(exc).__name__) from None
    if type(h) is not dict:
        raise _fail(Reason.HEADER_INVALID, "header must be a msgpack map")
    schema = h.get("schema")
    if schema == ROLLOUT_SCHEMA:
        newer_minor = False
    else:
        family, major, minor = parse_schema(schema)
        if family != ROLLOUT_FAMILY:
            raise _fail(Reason.SCHEMA_UNKNOWN, f"schema family {family!r}")
        if major != ROLLOUT_MAJOR:
            raise _fail(Reason.SCHEMA_MAJOR, f"major {major}; this reader speaks {ROLLOUT_MAJOR}")
        newer_minor = minor > ROLLOUT_MINOR
    # 3. header fields: one fused test, the field-by-field one only to name a failure
    run_id = h.get("run_id")
    actor_id = h.get("actor_id")
    seq = h.get("seq")
    version = h.get("policy_version")
    created_ns = h.get("created_ns")
    env_id = h.get("env_id")
    n = h.get("num_envs")
    t = h.get("num_steps")
    table = h.get("arrays")
    episodes = h.get("episodes")
    if not (
        type(run_id) is str
        and type(actor_id) is str
        and type(env_id) is str
        and type(seq) is int
        and type(version) is int
        and type(created_ns) is int
        and type(n) is int
        and type(t) is int
        and type(table) is list
        and type(episodes) is dict
        and len(run_id) <= MAX_ID_LEN
        and len(actor_id) <= MAX_ID_LEN
        and len(env_id) <= MAX_ID_LEN
        and seq >= 0
        and version >= 0
        and created_ns >= 0
        and n >= 1
        and t >= 1
    ):
        _header_fields(h)
    sent = h.get("sent")
    if sent is not None and (type(sent) is not int or sent < 1):
        raise _fail(Reason.HEADER_INVALID, "sent must be an int >= 1")
    stats = _episodes(episodes, t * n)
    # 4. header against the spec
    if run_id != spec.run_id:
        raise _fail(Reason.RUN_ID, f"run_id {run_id!r}, expected {spec.run_id!r}")
    if spec.env_id is not None and env_id != spec.env_id:
        raise _fail(Reason.ENV_ID, f"env_id {env_id!r}, expected {spec.env_id!r}")
    if t != spec.num_steps:
        raise _fail(Reason.SHAPE_MISMATCH, f"num_steps {t}, expected {spec.num_steps}")
    if (spec.num_envs is not None and n != spec.num_envs) or n > spec.max_envs:
        raise _fail(Reason.SHAPE_MISMATCH, f"num_envs {n} not accepted")
    if len(table) != nframes - 1:
        raise _fail(Reason.FRAME_COUNT, f"{len(table)} arrays declared, {nframes - 1} frames")
    # 5. the array table (cached plan when it is the table last accepted), byte counts
    pkey = (id(spec), n, newer_minor)
    plan = _PLANS.get(pkey)
    if (
        plan is None
        or plan.spec is not spec
        or table != plan.table
        # `==` takes 4.0 and True for 4 and 1; the full check would not.
        or not all([type(d) is int for e in table for d in e["shape"]])
    ):
        plan = _plan_for(table, spec, n, newer_minor, sizes)
        if len(_PLANS) >= _CACHE_LIMIT:
            _PLANS.clear()
        _PLANS[pkey] = plan
    if sizes[1:] != plan.sizes:
        for (name, *_), want, got in zip(plan.steps, plan.sizes, sizes[1:], strict=True):
            if want != got:
                raise _fail(Reason.BYTE_COUNT, f"{name}: frame has {got} bytes, shape says {want}")
    # 6. sequence, then contents (the only checks that read the bulk bytes)
    if seqs is not None:
        seqs.check(actor_id, seq)
    arrays: dict[str, np.ndarray] = {}
    # The dot products below may overflow or meet inf * 0; both only mean "look closer".
    with np.errstate(over="ignore", invalid="ignore"):
        for (name, dtype, shape, kind), frame in zip(plan.steps, frames[1:], strict=True):
            if kind == _PLAIN:
                arrays[name] = np.ndarray(shape, dtype, frame)
                continue
            if kind == _SKIP:
                continue
            flat = np.frombuffer(frame, dtype=dtype)
            if kind in (_FINITE, _BOX):
                # One BLAS dot instead of isfinite().all(): a NaN or inf anywhere makes it
                # non-finite. So do finite values large enough to overflow it (> ~1e19), so
                # a non-finite result is confirmed by the exact test. (ndarray.dot, not
                # np.dot: the method skips numpy's dispatch layer, half the cost here.)
                if not math.isfinite(flat.dot(flat)) and not np.isfinite(flat).all():
                    raise _fail(Reason.NON_FINITE, name)
                if kind == _BOX:
                    _check_box(flat, spec.action)
            elif kind == _FINITE16:
                if not np.isfinite(flat).all():
                    raise _fail(Reason.NON_FINITE, name)
            elif kind == _BOOL:
                # Any byte but 0 or 1 is not a bool; numpy would carry it through silently.
                if _umax(flat) > 1:
                    raise _fail(Reason.INVALID_VALUE, f"{name}: bool byte not 0 or 1")
                flat = flat.view(np.bool_)
            else:  # _DISCRETE
                # Viewed as unsigned, a negative action is huge: one max() checks both ends.
                if _umax(flat) >= spec.action.n:
                    i64 = flat.view(_I64)
                    lo, hi = i64.min(), i64.max()
                    raise _fail(
                        Reason.ACTION_OUT_OF_SPACE, f"actions in [{lo}, {hi}], n={spec.action.n}"
                    )
                flat = flat.view(_I64)
            arrays[name] = flat.reshape(shape) if len(shape) != 1 else flat
    # Positional: keyword passing costs a measurable share of a 40 us decode.
    return RolloutBatch(
        run_id, actor_id, seq, version, env_id, n, t, arrays, stats, created_ns, total, sent
    )


def peek_sender(frames: Sequence[Any]) -> tuple[str, int | None] | None:
    """(actor_id, sent) from a message `decode` refused, when its header names its sender
    (a msgpack map with a str `actor_id` of at most 256 chars); None otherwise. For the
    learner's ledger only: the id is as claimed, nothing else of the message is trusted."""
    try:
        if len(frames) < 1 or memoryview(frames[0]).nbytes > MAX_HEADER_BYTES:
            return None
        h = msgpack.unpackb(frames[0])
    except Exception:
        return None
    actor_id = h.get("actor_id") if type(h) is dict else None
    if type(actor_id) is not str or not actor_id or len(actor_id) > MAX_ID_LEN:
        return None
    sent = h.get("sent")
    return actor_id, sent if type(sent) is int and sent >= 1 else None


def _check_box(flat: np.ndarray, space: ActionSpace) -> None:
    """Each element against its own bounds: one min and one max per element over T*N."""
    low, high = space._low, space._high
    rows = flat.reshape(-1, math.prod(space.shape))  # [T*N*prod(A)] -> [T*N, prod(A)]
    for bound, extreme, outside in ((low, _umin, np.less), (high, _umax, np.greater)):
        if bound is None:
            continue
        bad = outside(extreme(rows, axis=0), bound)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            side = "low" if bound is low else "high"
            raise _fail(
                Reason.ACTION_OUT_OF_SPACE,
                f"continuous action element {i} outside the box ({side} {bound[i]})",
            )


def _plan_for(
    table: list[Any], spec: RolloutSpec, n: int, newer_minor: bool, sizes: list[int]
) -> _Plan:
    """Check every entry of the array table in order (ROLLOUT.md, step 5) and plan the views.

    Byte counts are checked here per entry too, so that the first bad entry decides the
    reason exactly as the documented order says.
    """
    expected = spec.expected_arrays(n)
    space = spec.action
    seen: set[str] = set()
    steps: list[tuple[str, np.dtype, tuple[int, ...], int]] = []
    want_sizes: list[int] = []
    for i, entry in enumerate(table, start=1):
        if type(entry) is not dict:
            raise _fail(Reason.HEADER_INVALID, "array entry must be a map")
        name, dtype, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
        if type(name) is not str or not name or len(name) > MAX_ID_LEN:
            raise _fail(Reason.HEADER_INVALID, "array name must be a non-empty string")
        if name in seen:
            raise _fail(Reason.DUPLICATE_ARRAY, name)
        seen.add(name)
        if type(dtype) is not str or dtype not in ALLOWED_DTYPES:
            raise _fail(Reason.DTYPE_NOT_ALLOWED, f"{name}: {str(dtype)[:32]!r}")
        if (
            type(shape) is not list
            or len(shape) > MAX_RANK
            or not all(type(d) is int and 0 <= d < MAX_DIM for d in shape)
        ):
            raise _fail(Reason.SHAPE_MISMATCH, f"{name}: shape is not a list of sizes")
        want = expected.get(name)
        if want is None:
            if not newer_minor:
                raise _fail(Reason.UNKNOWN_ARRAY, name)
        else:
            if dtype != want[0]:
                raise _fail(Reason.DTYPE_MISMATCH, f"{name}: {dtype}, expected {want[0]}")
            if tuple(shape) != want[1]:
                raise _fail(Reason.SHAPE_MISMATCH, f"{name}: {shape}, expected {list(want[1])}")
        np_dtype = _NP_DTYPES[dtype]
        nbytes = math.prod(shape) * np_dtype.itemsize
        if nbytes != sizes[i]:
            raise _fail(
                Reason.BYTE_COUNT, f"{name}: frame has {sizes[i]} bytes, shape says {nbytes}"
            )
        want_sizes.append(nbytes)
        if want is None:
            steps.append((name, np_dtype, tuple(shape), _SKIP))
            continue
        kind = _PLAIN
        if name == "actions" and space.kind == "discrete":
            kind, np_dtype = _DISCRETE, np.dtype("<u8")
        elif name == "actions" and space.enforce_bounds:
            kind = _BOX
        elif dtype == "float16":
            kind = _FINITE16
        elif dtype in _FLOAT_DTYPES:
            kind = _FINITE
        elif dtype == "bool":
            kind, np_dtype = _BOOL, np.dtype("u1")
        if nbytes == 0:
            # Reductions of an empty array raise, and there is nothing to check.
            kind, np_dtype = _PLAIN, _NP_DTYPES[dtype]
        steps.append((name, np_dtype, tuple(shape), kind))
    for name, (_, _, required) in expected.items():
        if required and name not in seen:
            raise _fail(Reason.MISSING_ARRAY, name)
    return _Plan(spec=spec, table=table, sizes=want_sizes, steps=steps)
