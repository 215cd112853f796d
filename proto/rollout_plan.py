"""Rollout message v1, the array table: the full, reason-by-reason check of a header's
`arrays` (`plan_for`, ROLLOUT.md step 5) and the plan it yields, which says how `decode`
views and checks each frame; `check_box` checks continuous actions against their box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppomq.proto.errors import DecodeError, Reason
from ppomq.proto.rollout_types import (
    ALLOWED_DTYPES,
    FLOAT_DTYPES,
    MAX_DIM,
    MAX_ID_LEN,
    MAX_RANK,
    NP_DTYPES,
    ActionSpace,
    RolloutSpec,
)

# What decode does with each array's bytes (ROLLOUT.md "Content checks").
SKIP, PLAIN, FINITE, FINITE16, BOOL, _DISCRETE, BOX, INDEX = range(8)


@dataclass(slots=True)
class Plan:
    """A validated array table for one (spec, N, newer-minor): how to view each frame."""

    spec: RolloutSpec
    table: list[Any]  # the header's `arrays` value, exactly as accepted
    sizes: list[int]  # expected byte count of frames 1..k
    # (name, dtype to view the frame as, shape, check kind) per frame
    steps: list[tuple[str, np.dtype, tuple[int, ...], int]]
    # The frames layout (1.2): K, the number of frames; 0 when the batch sends `obs`.
    num_frames: int = 0


umax = np.maximum.reduce  # the ufunc itself: ndarray.max() adds a Python-level wrapper
_umin = np.minimum.reduce
I64 = NP_DTYPES["int64"]


def fail(reason: Reason, detail: str) -> DecodeError:
    return DecodeError(reason, detail)


def check_box(flat: np.ndarray, space: ActionSpace) -> None:
    """Each element against its own bounds: one min and one max per element over T*N."""
    low, high = space._low, space._high
    rows = flat.reshape(-1, math.prod(space.shape))  # [T*N*prod(A)] -> [T*N, prod(A)]
    for bound, extreme, outside in ((low, _umin, np.less), (high, umax, np.greater)):
        if bound is None:
            continue
        bad = outside(extreme(rows, axis=0), bound)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            side = "low" if bound is low else "high"
            raise fail(
                Reason.ACTION_OUT_OF_SPACE,
                f"continuous action element {i} outside the box ({side} {bound[i]})",
            )


def plan_for(
    table: list[Any], spec: RolloutSpec, n: int, newer_minor: bool, sizes: list[int]
) -> Plan:
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
            raise fail(Reason.HEADER_INVALID, "array entry must be a map")
        name, dtype, shape = entry.get("name"), entry.get("dtype"), entry.get("shape")
        if type(name) is not str or not name or len(name) > MAX_ID_LEN:
            raise fail(Reason.HEADER_INVALID, "array name must be a non-empty string")
        if name in seen:
            raise fail(Reason.DUPLICATE_ARRAY, name)
        seen.add(name)
        if type(dtype) is not str or dtype not in ALLOWED_DTYPES:
            raise fail(Reason.DTYPE_NOT_ALLOWED, f"{name}: {str(dtype)[:32]!r}")
        if (
            type(shape) is not list
            or len(shape) > MAX_RANK
            or not all(type(d) is int and 0 <= d < MAX_DIM for d in shape)
        ):
            raise fail(Reason.SHAPE_MISMATCH, f"{name}: shape is not a list of sizes")
        want = expected.get(name)
        if want is None:
            if not newer_minor:
                raise fail(Reason.UNKNOWN_ARRAY, name)
        else:
            if dtype != want[0]:
                raise fail(Reason.DTYPE_MISMATCH, f"{name}: {dtype}, expected {want[0]}")
            if name == "frames":
                # [K, *F]: K is the batch's own, at least 1 and at most T*N*S
                limit = math.prod(expected["obs_frames"][1])
                if tuple(shape[1:]) != want[1][1:] or not shape or not 1 <= shape[0] <= limit:
                    raise fail(
                        Reason.SHAPE_MISMATCH,
                        f"frames: {shape}, expected [K, {', '.join(map(str, want[1][1:]))}] "
                        f"with 1 <= K <= {limit}",
                    )
            elif tuple(shape) != want[1]:
                raise fail(Reason.SHAPE_MISMATCH, f"{name}: {shape}, expected {list(want[1])}")
        np_dtype = NP_DTYPES[dtype]
        nbytes = math.prod(shape) * np_dtype.itemsize
        if nbytes != sizes[i]:
            raise fail(
                Reason.BYTE_COUNT, f"{name}: frame has {sizes[i]} bytes, shape says {nbytes}"
            )
        want_sizes.append(nbytes)
        if want is None:
            steps.append((name, np_dtype, tuple(shape), SKIP))
            continue
        kind = PLAIN
        if name == "obs_frames":
            kind, np_dtype = INDEX, np.dtype("<u4")  # a negative index is huge as unsigned
        elif name == "actions" and space.kind == "discrete":
            kind, np_dtype = _DISCRETE, np.dtype("<u8")
        elif name == "actions" and space.enforce_bounds:
            kind = BOX
        elif dtype == "float16":
            kind = FINITE16
        elif dtype in FLOAT_DTYPES:
            kind = FINITE
        elif dtype == "bool":
            kind, np_dtype = BOOL, np.dtype("u1")
        if nbytes == 0:
            # Reductions of an empty array raise, and there is nothing to check.
            kind, np_dtype = PLAIN, NP_DTYPES[dtype]
        steps.append((name, np_dtype, tuple(shape), kind))
    # (Only where the spec knows them: a newer minor's unknown arrays are ignored.)
    frames = "frames" in seen and "frames" in expected
    obs_frames = "obs_frames" in seen and "obs_frames" in expected
    if "obs" in seen and (frames or obs_frames):
        # Observations sent twice: once as `obs`, once (or half) as frames.
        raise fail(Reason.DUPLICATE_ARRAY, "obs and the frames layout both sent")
    if "obs" not in seen and (frames or obs_frames):
        if not obs_frames:
            raise fail(Reason.MISSING_ARRAY, "obs_frames (frames without it)")
        if not frames:
            raise fail(Reason.MISSING_ARRAY, "frames (obs_frames without it)")
    layout = frames and obs_frames
    for name, (_, _, required) in expected.items():
        if required and name not in seen and not (name == "obs" and layout):
            raise fail(Reason.MISSING_ARRAY, name)
    num_frames = 0
    if layout:
        num_frames = next(shape[0] for name, _, shape, _ in steps if name == "frames")
        # The rebuilt obs is as large as the obs layout would be: the same cap applies.
        want = expected["obs"]
        rebuilt = math.prod(want[1]) * NP_DTYPES[want[0]].itemsize
        if rebuilt > spec.max_bytes:
            raise fail(Reason.OVERSIZE, f"rebuilt obs of {rebuilt} bytes > cap {spec.max_bytes}")
    return Plan(spec=spec, table=table, sizes=want_sizes, steps=steps, num_frames=num_frames)
