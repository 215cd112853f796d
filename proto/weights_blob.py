"""Weights message v1: a msgpack header and one contiguous blob (see WEIGHTS.md).

The blob holds every tensor back to back, each starting on a 64-byte boundary so that a
receiver can take `np.frombuffer` views of it without copying or misaligned reads.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from ppomq.proto.errors import DecodeError, Reason
from ppomq.proto.rollout_types import (
    ALLOWED_DTYPES,
    MAX_DIM,
    MAX_ID_LEN,
    MAX_RANK,
    WIRE_DTYPES,
    parse_schema,
)

WEIGHTS_SCHEMA = "ppomq.weights/1.6"
WEIGHTS_FAMILY = "ppomq.weights"
WEIGHTS_MAJOR, WEIGHTS_MINOR = 1, 0
ALIGNMENT = 64
MAX_HEADER_BYTES = 1 << 20
DEFAULT_MAX_WEIGHTS_BYTES = 1 << 30
_SHA256_RE = re.compile(r"[0-9a-f]{64}", re.ASCII)


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """Where one named tensor lies in the blob."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class WeightsHeader:
    """Everything about a parameter set except its bytes."""

    version: int
    created_ns: int
    learner_step: int
    env_steps: int
    model: dict[str, Any]
    tensors: tuple[TensorEntry, ...]
    sha256: str
    blob_size: int
    extra: dict[str, Any] = field(default_factory=dict)
    # What actors apply outside the network (1.1): {"reward_norm": {...}} or {}.
    actor: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": WEIGHTS_SCHEMA,
            "version": self.version,
            "created_ns": self.created_ns,
            "learner_step": self.learner_step,
            "env_steps": self.env_steps,
            "model": self.model,
            "tensors": [
                {
                    "name": t.name,
                    "dtype": t.dtype,
                    "shape": list(t.shape),
                    "offset": t.offset,
                    "nbytes": t.nbytes,
                }
                for t in self.tensors
            ],
            "sha256": self.sha256,
            "blob_size": self.blob_size,
            "extra": self.extra,
            "actor": self.actor,
        }

    def pack(self) -> bytes:
        return msgpack.packb(self.to_dict(), use_bin_type=True)


def _aligned(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def pack_weights(
    version: int,
    tensors: Mapping[str, np.ndarray],
    *,
    model: dict[str, Any] | None = None,
    learner_step: int = 0,
    env_steps: int = 0,
    created_ns: int | None = None,
    extra: dict[str, Any] | None = None,
    actor: dict[str, Any] | None = None,
) -> tuple[WeightsHeader, bytes]:
    """Lay `tensors` out in one blob (the single copy) and describe it in a header."""
    entries: list[TensorEntry] = []
    pieces: list[Any] = []  # bytes-likes joined once below: the single copy
    offset = 0
    for name, value in tensors.items():
        arr = np.asarray(value)
        dtype_name = arr.dtype.name
        if dtype_name not in ALLOWED_DTYPES:
            raise ValueError(f"tensor {name!r} has dtype {dtype_name}, not one of the wire dtypes")
        # ascontiguousarray returns at least 1-D: keep a 0-d tensor's shape ().
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).reshape(arr.shape)
        if arr.nbytes:  # an empty tensor needs no alignment, and must not pad the blob's end
            start = _aligned(offset)
            pieces.append(bytes(start - offset))
            pieces.append(arr.reshape(-1).view(np.uint8))
            offset = start
        entries.append(TensorEntry(name, dtype_name, tuple(arr.shape), offset, arr.nbytes))
        offset += arr.nbytes
    data = b"".join(pieces)
    header = WeightsHeader(
        version=int(version),
        created_ns=int(created_ns if created_ns is not None else time.time_ns()),
        learner_step=int(learner_step),
        env_steps=int(env_steps),
        model=dict(model or {}),
        tensors=tuple(entries),
        sha256=hashlib.sha256(data).hexdigest(),
        blob_size=len(data),
        extra=dict(extra or {}),
        actor=dict(actor or {}),
    )
    return header, data


def encode_weights(header: WeightsHeader, blob: bytes | memoryview) -> list[Any]:
    """The two frames of a weights message: the packed header and the blob itself."""
    return [header.pack(), blob]


def _require(cond: bool, reason: Reason, detail: str) -> None:
    if not cond:
        raise DecodeError(reason, detail)


def _int(value: Any, name: str) -> int:
    # `type(x) is int` rejects bool, which msgpack would otherwise let through as an int.
    _require(type(value) is int and value >= 0, Reason.HEADER_INVALID, f"{name}: int >= 0")
    return value


def parse_weights_header(raw: bytes | memoryview) -> WeightsHeader:
    """Decode and check a weights header alone (what `weights list` reads).

    Checks run in the order WEIGHTS.md gives, so each bad header has one defined reason.
    """
    try:
        return _parse_header(raw)
    except DecodeError:
        raise
    except Exception as exc:  # the promise: nothing but DecodeError leaves a decoder
        detail = f"malformed header: {type(exc).__name__}"
        raise DecodeError(Reason.HEADER_INVALID, detail) from None


def _parse_header(raw: bytes | memoryview) -> WeightsHeader:
    size = memoryview(raw).nbytes
    _require(size <= MAX_HEADER_BYTES, Reason.OVERSIZE, f"header of {size} bytes > 1 MiB")
    try:
        doc = msgpack.unpackb(raw)  # msgpack 1.x: raw=False, strict_map_key=True
    except Exception as exc:  # msgpack raises several unrelated types
        raise DecodeError(Reason.HEADER_NOT_MSGPACK, type(exc).__name__) from None
    _require(type(doc) is dict, Reason.HEADER_INVALID, "weights header must be a map")
    family, major, _minor = parse_schema(doc.get("schema"))
    _require(family == WEIGHTS_FAMILY, Reason.SCHEMA_UNKNOWN, f"schema family {family!r}")
    _require(major == WEIGHTS_MAJOR, Reason.SCHEMA_MAJOR, f"cannot read major {major}")
    version = _int(doc.get("version"), "version")
    created_ns = _int(doc.get("created_ns"), "created_ns")
    learner_step = _int(doc.get("learner_step"), "learner_step")
    env_steps = _int(doc.get("env_steps"), "env_steps")
    model, extra, actor = doc.get("model"), doc.get("extra", {}), doc.get("actor", {})
    _require(type(model) is dict, Reason.HEADER_INVALID, "model must be a map")
    _require(type(extra) is dict, Reason.HEADER_INVALID, "extra must be a map")
    _require(type(actor) is dict, Reason.HEADER_INVALID, "actor must be a map")
    sha = doc.get("sha256")
    _require(
        type(sha) is str and _SHA256_RE.fullmatch(sha) is not None,
        Reason.HEADER_INVALID,
        "sha256 must be 64 lowercase hex digits",
    )
    blob_size = _int(doc.get("blob_size"), "blob_size")
    raw_tensors = doc.get("tensors")
    _require(type(raw_tensors) is list, Reason.HEADER_INVALID, "tensors must be a list")
    entries = []
    seen: set[str] = set()
    end = 0  # where the previous tensor ended: tensors lie in order and never overlap
    for t in raw_tensors:
        _require(type(t) is dict, Reason.HEADER_INVALID, "tensor entry must be a map")
        name, dtype, shape = t.get("name"), t.get("dtype"), t.get("shape")
        _require(
            type(name) is str and 0 < len(name) <= MAX_ID_LEN,
            Reason.HEADER_INVALID,
            "tensor name must be a non-empty string",
        )
        offset = _int(t.get("offset"), f"{name}.offset")
        nbytes = _int(t.get("nbytes"), f"{name}.nbytes")
        _require(name not in seen, Reason.DUPLICATE_ARRAY, name)
        seen.add(name)
        _require(
            type(dtype) is str and dtype in ALLOWED_DTYPES,
            Reason.DTYPE_NOT_ALLOWED,
            f"tensor {name}: {str(dtype)[:32]!r}",
        )
        _require(
            type(shape) is list
            and len(shape) <= MAX_RANK
            and all(type(d) is int and 0 <= d < MAX_DIM for d in shape),
            Reason.SHAPE_MISMATCH,
            f"tensor {name}: shape is not a list of sizes",
        )
        expected = math.prod(shape) * WIRE_DTYPES[dtype].itemsize
        _require(nbytes == expected, Reason.BYTE_COUNT, f"tensor {name}: nbytes {nbytes}")
        _require(offset >= end, Reason.BYTE_COUNT, f"tensor {name} overlaps the one before")
        _require(
            nbytes == 0 or offset % ALIGNMENT == 0,
            Reason.BYTE_COUNT,
            f"tensor {name}: offset {offset} not a multiple of {ALIGNMENT}",
        )
        _require(offset + nbytes <= blob_size, Reason.BYTE_COUNT, f"tensor {name} past blob end")
        end = offset + nbytes
        entries.append(TensorEntry(name, dtype, tuple(shape), offset, nbytes))
    return WeightsHeader(
        version=version,
        created_ns=created_ns,
        learner_step=learner_step,
        env_steps=env_steps,
        model=model,
        tensors=tuple(entries),
        sha256=sha,
        blob_size=blob_size,
        extra=extra,
        actor=actor,
    )


def blob_digest(blob: bytes | memoryview) -> str:
    return hashlib.sha256(blob).hexdigest()


def decode_weights(
    frames: Sequence[Any],
    *,
    verify: bool = True,
    max_bytes: int = DEFAULT_MAX_WEIGHTS_BYTES,
) -> tuple[WeightsHeader, memoryview]:
    """Check a [header, blob] message; the blob comes back as a view, not a copy."""
    try:
        _require(len(frames) == 2, Reason.FRAME_COUNT, f"expected 2 frames, got {len(frames)}")
        head = memoryview(frames[0])
        blob = memoryview(frames[1]).cast("B")
        _require(head.nbytes <= MAX_HEADER_BYTES, Reason.OVERSIZE, "header over 1 MiB")
        _require(blob.nbytes <= max_bytes, Reason.OVERSIZE, f"blob of {blob.nbytes} bytes")
        header = _parse_header(head)
        _require(blob.nbytes == header.blob_size, Reason.BYTE_COUNT, "blob size differs")
        if verify:
            _require(blob_digest(blob) == header.sha256, Reason.CHECKSUM, "sha256 mismatch")
        return header, blob
    except DecodeError:
        raise
    except Exception as exc:  # the promise: nothing but DecodeError leaves a decoder
        raise DecodeError(
            Reason.HEADER_INVALID, f"unreadable weights message: {type(exc).__name__}"
        ) from None


def unpack_tensors(header: WeightsHeader, blob: bytes | memoryview) -> dict[str, np.ndarray]:
    """Read-only numpy views of each tensor, straight over the blob (no copy)."""
    out: dict[str, np.ndarray] = {}
    for t in header.tensors:
        dtype = WIRE_DTYPES[t.dtype]
        if t.nbytes:
            count = t.nbytes // dtype.itemsize
            arr = np.frombuffer(blob, dtype=dtype, count=count, offset=t.offset)
            arr = arr.reshape(t.shape)
        else:
            arr = np.empty(t.shape, dtype=dtype)
        arr.flags.writeable = False  # a view over a shared cache entry must not be written
        out[t.name] = arr
    return out
