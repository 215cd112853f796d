"""Rollout message v1, decoding: `decode` checks a received message against what the
learner expects and returns numpy views over the received frames, never copies. Every
failure is one `DecodeError`.

The decoder is on the learner's hot path (one call per batch), so the per-message work is
kept to one msgpack call, one comparison of the header's array table against the table
last accepted for the same spec and N (a cached "plan"), and one numpy reduction per array.
The full, reason-by-reason check (`plan_for`, rollout_plan) runs only when the table
differs; both paths raise the same reason for the same message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np

from ppomq.proto.errors import DecodeError, Reason
from ppomq.proto.rollout_frames import rebuild
from ppomq.proto.rollout_plan import (
    BOOL,
    BOX,
    FINITE,
    FINITE16,
    I64,
    INDEX,
    PLAIN,
    SKIP,
    Plan,
    check_box,
    fail,
    plan_for,
    umax,
)
from ppomq.proto.rollout_types import (
    CACHE_LIMIT,
    MAX_HEADER_BYTES,
    MAX_ID_LEN,
    ROLLOUT_FAMILY,
    ROLLOUT_MAJOR,
    ROLLOUT_MINOR,
    ROLLOUT_SCHEMA,
    EpisodeStats,
    RolloutBatch,
    RolloutSpec,
    SeqTracker,
    parse_schema,
)

_PLANS: dict[tuple[int, int, bool], Plan] = {}
_I32 = np.dtype("<i4")


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
            raise fail(Reason.HEADER_INVALID, f"{key} must be {kind.__name__}")
        if kind is str and len(value) > MAX_ID_LEN:
            raise fail(Reason.HEADER_INVALID, f"{key} longer than {MAX_ID_LEN}")
        if lo is not None and value < lo:
            raise fail(Reason.HEADER_INVALID, f"{key} must be >= {lo}")
    raise fail(Reason.HEADER_INVALID, "header fields")  # unreachable unless _FIELDS drifts


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
        raise fail(Reason.EPISODES_INVALID, "episodes.returns and .lengths must be lists")
    if len(returns) != len(lengths) or len(returns) > limit:
        raise fail(Reason.EPISODES_INVALID, "episodes lists differ in length or exceed T*N")
    if not returns:
        return EpisodeStats([], [])
    rtypes = set(map(type, returns))
    # sum() of finite floats can overflow to inf; only then is the exact per-item test run.
    if not rtypes <= {float, int} or not (
        math.isfinite(sum(returns)) or all(math.isfinite(r) for r in returns)
    ):
        raise fail(Reason.EPISODES_INVALID, "episode return must be a finite number")
    if set(map(type, lengths)) != {int} or min(lengths) < 1:
        raise fail(Reason.EPISODES_INVALID, "episode length must be an int >= 1")
    if int in rtypes:
        returns = [float(r) for r in returns]
    return EpisodeStats(returns, lengths)


def _decode(frames: Sequence[Any], spec: RolloutSpec, seqs: SeqTracker | None) -> RolloutBatch:
    # 1. frames and size, before anything is parsed
    nframes = len(frames)
    if nframes < 2:
        raise fail(Reason.FRAME_COUNT, f"{nframes} frames; a batch has a header and arrays")
    sizes = [memoryview(f).nbytes for f in frames]
    total = sum(sizes)
    if total > spec.max_bytes:
        raise fail(Reason.OVERSIZE, f"{total} bytes > cap {spec.max_bytes}")
    if sizes[0] > MAX_HEADER_BYTES:
        raise fail(Reason.OVERSIZE, f"header of {sizes[0]} bytes > {MAX_HEADER_BYTES}")
    # 2. header: msgpack map, schema
    try:
        h = msgpack.unpackb(frames[0])  # msgpack 1.x: raw=False, strict_map_key=True
    except Exception as exc:  # msgpack raises several unrelated types
        raise fail(Reason.HEADER_NOT_MSGPACK, type(exc).__name__) from None
    if type(h) is not dict:
        raise fail(Reason.HEADER_INVALID, "header must be a msgpack map")
    schema = h.get("schema")
    if schema == ROLLOUT_SCHEMA:
        newer_minor = False
    else:
        family, major, minor = parse_schema(schema)
        if family != ROLLOUT_FAMILY:
            raise fail(Reason.SCHEMA_UNKNOWN, f"schema family {family!r}")
        if major != ROLLOUT_MAJOR:
            raise fail(Reason.SCHEMA_MAJOR, f"major {major}; this reader speaks {ROLLOUT_MAJOR}")
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
        raise fail(Reason.HEADER_INVALID, "sent must be an int >= 1")
    weights_wait = h.get("weights_wait")
    if weights_wait is not None and not (type(weights_wait) is float and 0 <= weights_wait <= 1):
        raise fail(Reason.HEADER_INVALID, "weights_wait must be a float in [0, 1]")
    stats = _episodes(episodes, t * n)
    # 4. header against the spec
    if run_id != spec.run_id:
        raise fail(Reason.RUN_ID, f"run_id {run_id!r}, expected {spec.run_id!r}")
    if spec.env_id is not None and env_id != spec.env_id:
        raise fail(Reason.ENV_ID, f"env_id {env_id!r}, expected {spec.env_id!r}")
    if t != spec.num_steps:
        raise fail(Reason.SHAPE_MISMATCH, f"num_steps {t}, expected {spec.num_steps}")
    if (spec.num_envs is not None and n != spec.num_envs) or n > spec.max_envs:
        raise fail(Reason.SHAPE_MISMATCH, f"num_envs {n} not accepted")
    if len(table) != nframes - 1:
        raise fail(Reason.FRAME_COUNT, f"{len(table)} arrays declared, {nframes - 1} frames")
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
        plan = plan_for(table, spec, n, newer_minor, sizes)
        if len(_PLANS) >= CACHE_LIMIT:
            _PLANS.clear()
        _PLANS[pkey] = plan
    if sizes[1:] != plan.sizes:
        for (name, *_), want, got in zip(plan.steps, plan.sizes, sizes[1:], strict=True):
            if want != got:
                raise fail(Reason.BYTE_COUNT, f"{name}: frame has {got} bytes, shape says {want}")
    # 6. sequence, then contents (the only checks that read the bulk bytes)
    if seqs is not None:
        seqs.check(actor_id, seq)
    arrays: dict[str, np.ndarray] = {}
    # The dot products below may overflow or meet inf * 0; both only mean "look closer".
    with np.errstate(over="ignore", invalid="ignore"):
        for (name, dtype, shape, kind), frame in zip(plan.steps, frames[1:], strict=True):
            if kind == PLAIN:
                arrays[name] = np.ndarray(shape, dtype, frame)
                continue
            if kind == SKIP:
                continue
            flat = np.frombuffer(frame, dtype=dtype)
            if kind in (FINITE, BOX):
                # One BLAS dot instead of isfinite().all(): a NaN or inf anywhere makes it
                # non-finite. So do finite values large enough to overflow it (> ~1e19), so
                # a non-finite result is confirmed by the exact test. (ndarray.dot, not
                # np.dot: the method skips numpy's dispatch layer, half the cost here.)
                if not math.isfinite(flat.dot(flat)) and not np.isfinite(flat).all():
                    raise fail(Reason.NON_FINITE, name)
                if kind == BOX:
                    check_box(flat, spec.action)
            elif kind == FINITE16:
                if not np.isfinite(flat).all():
                    raise fail(Reason.NON_FINITE, name)
            elif kind == INDEX:
                # Viewed as unsigned, a negative index is huge: one max() checks both ends;
                # then every frame must be some stack's (no frame is sent for nothing).
                k = plan.num_frames
                if umax(flat) >= k:
                    i32 = flat.view(_I32)
                    raise fail(
                        Reason.INVALID_VALUE,
                        f"{name}: indices in [{i32.min()}, {i32.max()}], {k} frames",
                    )
                flat = flat.view(_I32)
                used = np.zeros(k, np.bool_)
                used[flat] = True
                if not used.all():
                    raise fail(
                        Reason.INVALID_VALUE,
                        f"{name}: frame {int(np.argmin(used))} of {k} is in no stack",
                    )
            elif kind == BOOL:
                # Any byte but 0 or 1 is not a bool; numpy would carry it through silently.
                if umax(flat) > 1:
                    raise fail(Reason.INVALID_VALUE, f"{name}: bool byte not 0 or 1")
                flat = flat.view(np.bool_)
            else:  # _DISCRETE
                # Viewed as unsigned, a negative action is huge: one max() checks both ends.
                if umax(flat) >= spec.action.n:
                    i64 = flat.view(I64)
                    lo, hi = i64.min(), i64.max()
                    raise fail(
                        Reason.ACTION_OUT_OF_SPACE, f"actions in [{lo}, {hi}], n={spec.action.n}"
                    )
                flat = flat.view(I64)
            arrays[name] = flat.reshape(shape) if len(shape) != 1 else flat
    if plan.num_frames:
        # The frames layout (1.2): the learner gets `obs` as if it had been sent.
        # In the place of `frames`, so the arrays keep the order they were sent in.
        obs = rebuild(arrays["frames"], arrays["obs_frames"])
        arrays = {
            ("obs" if k == "frames" else k): (obs if k == "frames" else v)
            for k, v in arrays.items()
            if k != "obs_frames"
        }
    # Positional: keyword passing costs a measurable share of a whole decode.
    batch = RolloutBatch(
        run_id, actor_id, seq, version, env_id, n, t, arrays, stats, created_ns, total, sent
    )
    batch.weights_wait = weights_wait
    return batch


def peek_sender(frames: Sequence[Any]) -> str | None:
    """The actor_id a message `decode` refused names, when its header names one (a msgpack
    map with a str `actor_id` of at most 256 chars); None otherwise. For the learner's
    ledger only: the id is as claimed, and nothing else of the message is taken (not its
    `sent`: a refused message must not move an actor's figures)."""
    try:
        if len(frames) < 1 or memoryview(frames[0]).nbytes > MAX_HEADER_BYTES:
            return None
        h = msgpack.unpackb(frames[0])
    except Exception:
        return None
    actor_id = h.get("actor_id") if type(h) is dict else None
    if type(actor_id) is not str or not actor_id or len(actor_id) > MAX_ID_LEN:
        return None
    return actor_id
