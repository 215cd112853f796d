"""Weights message v1: a msgpack header and one contiguous blob (see WEIGHTS.md).

The blob holds every tensor back to back, each starting on a 64-byte boundary so that a
receiver can take `np.frombuffer` views of it without copying or misaligned reads.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from .errors import DecodeError, Reason
from .rollout import ALLOWED_DTYPES, parse_schema

WEIGHTS_SCHEMA = "ppomq.weights/1.0"
WEIGHTS_MAJOR, WEIGHTS_MINOR = 1, 0
ALIGNMENT = 64
MAX_HEADER_BYTES = 1 << 20
DEFAULT_MAX_WEIGHTS_BYTES = 1 << 30


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
) -> tuple[WeightsHeader, bytes]:
    """Lay `tensors` out in one blob (the single copy) and describe it in a header."""
    entries: list[TensorEntry] = []
    offset = 0
    arrays: list[tuple[int, np.ndarray]] = []
    for name, value in tensors.items():
        arr = np.asarray(value)
        dtype_name = arr.dtype.name
        if dtype_name not in ALLOWED_DTYPES:
            raise ValueError(f"tensor {name!r} has dtype {dtype_name}, not one of the wire dtypes")
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        offset = _aligned(offset)
        entries.append(TensorEntry(name, dtype_name, tuple(arr.shape), offset, arr.nbytes))
        arrays.append((offset, arr))
        offset += arr.nbytes
    blob = bytearray(offset)
    for start, arr in arrays:
        blob[start : start + arr.nbytes] = arr.reshape(-1).view(np.uint8).data
    data = bytes(blob)
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
    )
    return header, data


def encode_weights(header: WeightsHeader, blob: bytes | memoryview) -> list[Any]:
    """The two frames of a weights message: the packed header and the blob itself."""
    return [header.pack(), blob]


def _require(cond: bool, reason: Reason, detail: str) -> None:
    if not cond:
        raise DecodeError(reason, detail)


def _int(value: Any, name: str, lo: int = 0) -> int:
    _require(
        type(value) is int and value >= lo, Reason.HEADER_INVALID, f"{name} must be an int >= {lo}"
    )
    return value


def parse_weights_header(raw: bytes | memoryview) -> WeightsHeader:
    """Decode and check a weights header alone (what `weights list` reads)."""
    _require(len(raw) <= MAX_HEADER_BYTES, Reason.OVERSIZE, "weights header over 1 MiB")
    try:
        doc = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise DecodeError(Reason.HEADER_NOT_MSGPACK, f"weights header: {exc}") from None
    _require(isinstance(doc, dict), Reason.HEADER_INVALID, "weights header must be a map")
    schema = doc.get("schema")
    _require(isinstance(schema, str), Reason.HEADER_INVALID, "schema must be a string")
    family, major, _minor = parse_schema(schema)
    _require(family == "ppomq.weights", Reason.SCHEMA_UNKNOWN, f"schema {schema!r}")
    _require(major == WEIGHTS_MAJOR, Reason.SCHEMA_MAJOR, f"cannot read major {major}")
    raw_tensors = doc.get("tensors")
    _require(isinstance(raw_tensors, list), Reason.HEADER_INVALID, "tensors must be a list")
    blob_size = _int(doc.get("blob_size"), "blob_size")
    entries = []
    for t in raw_tensors:
        _require(isinstance(t, dict), Reason.HEADER_INVALID, "tensor entry must be a map")
        name, dtype, shape = t.get("name"), t.get("dtype"), t.get("shape")
        _require(isinstance(name, str), Reason.HEADER_INVALID, "tensor name must be a string")
        _require(dtype in ALLOWED_DTYPES, Reason.DTYPE_NOT_ALLOWED, f"tensor {name}: {dtype!r}")
        _require(
            isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape),
            Reason.SHAPE_MISMATCH,
            f"tensor {name}: bad shape",
        )
        offset = _int(t.get("offset"), "offset")
        nbytes = _int(t.get("nbytes"), "nbytes")
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        _require(nbytes == expected, Reason.BYTE_COUNT, f"tensor {name}: nbytes {nbytes}")
        _require(offset + nbytes <= blob_size, Reason.BYTE_COUNT, f"tensor {name} past blob end")
        entries.append(TensorEntry(name, dtype, tuple(shape), offset, nbytes))
    model, extra = doc.get("model", {}), doc.get("extra", {})
    sha = doc.get("sha256")
    _require(isinstance(model, dict) and isinstance(extra, dict), Reason.HEADER_INVALID, "model")
    _require(isinstance(sha, str) and len(sha) == 64, Reason.HEADER_INVALID, "sha256")
    return WeightsHeader(
        version=_int(doc.get("version"), "version"),
        created_ns=_int(doc.get("created_ns"), "created_ns"),
        learner_step=_int(doc.get("learner_step"), "learner_step"),
        env_steps=_int(doc.get("env_steps"), "env_steps"),
        model=model,
        tensors=tuple(entries),
        sha256=sha,
        blob_size=blob_size,
        extra=extra,
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
        header = parse_weights_header(memoryview(frames[0]))
        blob = memoryview(frames[1]).cast("B")
        _require(blob.nbytes <= max_bytes, Reason.OVERSIZE, f"blob of {blob.nbytes} bytes")
        _require(blob.nbytes == header.blob_size, Reason.BYTE_COUNT, "blob size differs")
        if verify:
            _require(blob_digest(blob) == header.sha256, Reason.CHECKSUM, "sha256 mismatch")
        return header, blob
    except DecodeError:
        raise
    except Exception as exc:  # the promise: nothing but DecodeError leaves a decoder
        raise DecodeError(Reason.HEADER_INVALID, f"unreadable weights message: {exc}") from None


def unpack_tensors(header: WeightsHeader, blob: bytes | memoryview) -> dict[str, np.ndarray]:
    """Read-only numpy views of each tensor, straight over the blob."""
    return {
        t.name: np.frombuffer(
            blob,
            dtype=np.dtype(t.dtype).newbyteorder("<"),
            count=t.nbytes // np.dtype(t.dtype).itemsize if t.nbytes else 0,
            offset=t.offset,
        ).reshape(t.shape)
        for t in header.tensors
    }
