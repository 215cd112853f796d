"""Rollout message v1: one msgpack header frame, then one raw frame per array (ROLLOUT.md).

`encode` returns frames that reference the caller's arrays (send them with `copy=False`);
`decode` checks a received message against what the learner expects and returns numpy
views over the received frames, never copies. Every failure is one `DecodeError`.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgpack
import numpy as np

from .errors import DecodeError, Reason

ROLLOUT_SCHEMA = "ppomq.rollout/1.0"
ROLLOUT_FAMILY = "ppomq.rollout"
ROLLOUT_MAJOR, ROLLOUT_MINOR = 1, 0

# The wire dtypes. All multi-byte types are little-endian on the wire.
ALLOWED_DTYPES: frozenset[str] = frozenset(
    {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}
)
_FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})
_NP_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in ALLOWED_DTYPES}

MAX_HEADER_BYTES = 1 << 20  # 1 MiB: episodes lists make the header grow with T*N
MAX_RANK = 8
MAX_DIM = 1 << 31
DEFAULT_MAX_BYTES = 256 << 20
MAX_ID_LEN = 256
MAX_ACTORS_TRACKED = 1 << 16

_SCHEMA_RE = re.compile(r"^([a-z0-9_.]+)/(\d{1,6})\.(\d{1,6})$")


def parse_schema(schema: str) -> tuple[str, int, int]:
    """'ppomq.rollout/1.0' -> ('ppomq.rollout', 1, 0); anything else is SCHEMA_UNKNOWN."""
    m = _SCHEMA_RE.match(schema)
    if m is None:
        raise DecodeError(Reason.SCHEMA_UNKNOWN, f"schema {schema[:64]!r} is not family/M.m")
    return m.group(1), int(m.group(2)), int(m.group(3))


@dataclass(frozen=True, slots=True)
class ActionSpace:
    """The action space the learner trains: `discrete` (n choices) or `continuous` (a box).

    Continuous bounds are enforced only when `enforce_bounds`: Gaussian policies send the
    unclipped sample (its log-prob is what the ratio needs) and clip at the env instead.
    """

    kind: Literal["discrete", "continuous"]
    n: int = 0
    shape: tuple[int, ...] = ()
    low: float | None = None
    high: float | None = None
    enforce_bounds: bool = False


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


class SeqTracker:
    """Last accepted `seq` per actor_id, bounded (least recently seen actors forgotten)."""

    def __init__(self, max_actors: int = MAX_ACTORS_TRACKED) -> None:
        self._last: OrderedDict[str, int] = OrderedDict()
        self._max = max_actors

    def check(self, actor_id: str, seq: int) -> None:
        last = self._last.get(actor_id)
        if last is not None and seq <= last:
            raise DecodeError(Reason.SEQ_NOT_INCREASING, f"{actor_id}: seq {seq} after {last}")

    def record(self, actor_id: str, seq: int) -> None:
        self._last[actor_id] = seq
        self._last.move_to_end(actor_id)
        if len(self._last) > self._max:
            self._last.popitem(last=False)

    def __len__(self) -> int:
        return len(self._last)


def _wire_array(arr: np.ndarray) -> np.ndarray:
    """C-contiguous little-endian, as the wire wants; a no-op (no copy) in the usual case."""
    if arr.dtype.byteorder == ">" or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return arr


def encode(batch: RolloutBatch) -> list[Any]:
    """Frames for one batch: the packed header, then the arrays themselves (no copy).

    Send with `socket.send_multipart(frames, copy=False)`; do not mutate the arrays until
    ZeroMQ has sent them (the actor double-buffers for this reason).
    """
    frames: list[Any] = [b""]
    specs = []
    for name, arr in batch.arrays.items():
        arr = _wire_array(arr)
        if arr.dtype.name not in ALLOWED_DTYPES:
            raise ValueError(f"array {name!r}: dtype {arr.dtype.name} is not a wire dtype")
        specs.append({"name": name, "dtype": arr.dtype.name, "shape": list(arr.shape)})
        frames.append(arr)
    header = {
        "schema": ROLLOUT_SCHEMA,
        "run_id": batch.run_id,
        "actor_id": batch.actor_id,
        "seq": batch.seq,
        "policy_version": batch.policy_version,
        "created_ns": batch.created_ns,
        "env_id": batch.env_id,
        "num_envs": batch.num_envs,
        "num_steps": batch.num_steps,
        "arrays": specs,
        "episodes": {"returns": batch.episodes.returns, "lengths": batch.episodes.lengths},
    }
    frames[0] = msgpack.packb(header, use_bin_type=True)
    return frames


def _fail(reason: Reason, detail: str) -> DecodeError:
    return DecodeError(reason, detail)


def _get(header: dict, key: str, kind: type, lo: int | None = None) -> Any:
    value = header.get(key)
    # `type(x) is int` rejects bool, which msgpack would otherwise let through as an int.
    if type(value) is not kind:
        raise _fail(Reason.HEADER_INVALID, f"{key} must be {kind.__name__}")
    if kind is str and len(value) > MAX_ID_LEN:
        raise _fail(Reason.HEADER_INVALID, f"{key} longer than {MAX_ID_LEN}")
    if lo is not None and value < lo:
        raise _fail(Reason.HEADER_INVALID, f"{key} must be >= {lo}")
    return value


def _frame_len(frame: Any) -> int:
    return memoryview(frame).nbytes


def _episodes(raw: Any, limit: int) -> EpisodeStats:
    if not isinstance(raw, dict):
        raise _fail(Reason.EPISODES_INVALID, "episodes must be a map")
    returns, lengths = raw.get("returns"), raw.get("lengths")
    if not (isinstance(returns, list) and isinstance(lengths, list)):
        raise _fail(Reason.EPISODES_INVALID, "episodes.returns and .lengths must be lists")
    if len(returns) != len(lengths) or len(returns) > limit:
        raise _fail(Reason.EPISODES_INVALID, "episodes lists differ in length or exceed T*N")
    for r in returns:
        if type(r) not in (float, int) or not math.isfinite(r):
            raise _fail(Reason.EPISODES_INVALID, "episode return must be a finite number")
    for n in lengths:
        if type(n) is not int or n < 1:
            raise _fail(Reason.EPISODES_INVALID, "episode length must be an int >= 1")
    return EpisodeStats([float(r) for r in returns], lengths)


def decode(
    frames: Sequence[Any], spec: RolloutSpec, seqs: SeqTracker | None = None
) -> RolloutBatch:
    """Check a received message against `spec` and return it as a batch of views.

    Checks run in the order ROLLOUT.md gives, so each bad message has one defined reason.
    With `seqs`, `seq` must rise per actor_id and is recorded once the batch is accepted.
    """
    try:
        return _decode(frames, spec, seqs)
    except DecodeError:
        raise
    except Exception as exc:  # the promise: nothing but DecodeError leaves decode
        raise DecodeError(
            Reason.HEADER_INVALID, f"malformed message: {type(exc).__name__}"
        ) from None


def _decode(frames: Sequence[Any], spec: RolloutSpec, seqs: SeqTracker | None) -> RolloutBatch:
    nframes = len(frames)
    if nframes < 2:
        raise _fail(Reason.FRAME_COUNT, f"{nframes} frames; a batch has a header and arrays")
    sizes = [_frame_len(f) for f in frames]
    total = sum(sizes)
    if total > spec.max_bytes:
        raise _fail(Reason.OVERSIZE, f"{total} bytes > cap {spec.max_bytes}")
    if sizes[0] > MAX_HEADER_BYTES:
        raise _fail(Reason.OVERSIZE, f"header of {sizes[0]} bytes > {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(frames[0], raw=False, strict_map_key=True)
    except Exception as exc:
        raise _fail(Reason.HEADER_NOT_MSGPACK, type(exc).__name__) from None
    if not isinstance(header, dict):
        raise _fail(Reason.HEADER_INVALID, "header must be a msgpack map")

    schema = header.get("schema")
    if type(schema) is not str:
        raise _fail(Reason.SCHEMA_UNKNOWN, "schema missing")
    family, major, minor = parse_schema(schema)
    if family != ROLLOUT_FAMILY:
        raise _fail(Reason.SCHEMA_UNKNOWN, f"schema family {family!r}")
    if major != ROLLOUT_MAJOR:
        raise _fail(Reason.SCHEMA_MAJOR, f"major {major}; this reader speaks {ROLLOUT_MAJOR}")
    newer_minor = minor > ROLLOUT_MINOR

    run_id = _get(header, "run_id", str)
    actor_id = _get(header, "actor_id", str)
    seq = _get(header, "seq", int, 0)
    version = _get(header, "policy_version", int, 0)
    created_ns = _get(header, "created_ns", int, 0)
    env_id = _get(header, "env_id", str)
    n = _get(header, "num_envs", int, 1)
    t = _get(header, "num_steps", int, 1)
    specs = header.get("arrays")
    if type(specs) is not list:
        raise _fail(Reason.HEADER_INVALID, "arrays must be a list")

    if run_id != spec.run_id:
        raise _fail(Reason.RUN_ID, f"run_id {run_id!r}, expected {spec.run_id!r}")
    if spec.env_id is not None and env_id != spec.env_id:
        raise _fail(Reason.ENV_ID, f"env_id {env_id!r}, expected {spec.env_id!r}")
    if t != spec.num_steps:
        raise _fail(Reason.SHAPE_MISMATCH, f"num_steps {t}, expected {spec.num_steps}")
    if (spec.num_envs is not None and n != spec.num_envs) or n > spec.max_envs:
        raise _fail(Reason.SHAPE_MISMATCH, f"num_envs {n} not accepted")
    if len(specs) != nframes - 1:
        raise _fail(Reason.FRAME_COUNT, f"{len(specs)} arrays declared, {nframes - 1} frames")

    expected = spec.expected_arrays(n)
    arrays: dict[str, np.ndarray] = {}
    for i, entry in enumerate(specs, start=1):
        if type(entry) is not dict:
            raise _fail(Reason.HEADER_INVALID, "array entry must be a map")
        name, dtype, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
        if type(name) is not str or len(name) > MAX_ID_LEN:
            raise _fail(Reason.HEADER_INVALID, "array name must be a string")
        if name in arrays:
            raise _fail(Reason.DUPLICATE_ARRAY, name)
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
        if want is not None:
            arrays[name] = np.frombuffer(frames[i], dtype=np_dtype).reshape(shape)
    for name, (_, _, required) in expected.items():
        if required and name not in arrays:
            raise _fail(Reason.MISSING_ARRAY, name)

    if seqs is not None:
        seqs.check(actor_id, seq)
    _check_contents(arrays, spec)
    episodes = _episodes(header.get("episodes", {"returns": [], "lengths": []}), t * n)
    if seqs is not None:
        seqs.record(actor_id, seq)
    return RolloutBatch(
        run_id=run_id,
        actor_id=actor_id,
        seq=seq,
        policy_version=version,
        env_id=env_id,
        num_envs=n,
        num_steps=t,
        arrays=arrays,
        episodes=episodes,
        created_ns=created_ns,
        nbytes=total,
    )


def _check_contents(arrays: dict[str, np.ndarray], spec: RolloutSpec) -> None:
    for name, arr in arrays.items():
        kind = arr.dtype.name
        if kind in _FLOAT_DTYPES:
            if arr.size and not np.isfinite(arr).all():
                raise _fail(Reason.NON_FINITE, name)
        elif kind == "bool" and arr.size and arr.view(np.uint8).max() > 1:
            # Any byte but 0 or 1 is not a bool; numpy would carry it through silently.
            raise _fail(Reason.INVALID_VALUE, f"{name}: bool byte not 0 or 1")
    actions = arrays["actions"]
    space = spec.action
    if not actions.size:
        return
    if space.kind == "discrete":
        lo, hi = actions.min(), actions.max()
        if lo < 0 or hi >= space.n:
            raise _fail(Reason.ACTION_OUT_OF_SPACE, f"actions in [{lo}, {hi}], n={space.n}")
    elif space.enforce_bounds and (
        (space.low is not None and actions.min() < space.low)
        or (space.high is not None and actions.max() > space.high)
    ):
        raise _fail(Reason.ACTION_OUT_OF_SPACE, "continuous action outside the box")
