"""The learner's checkpoint file: written atomically, verified before anything trusts it.

A checkpoint is three parts: a magic line, one line of JSON (the sha256 and size of the
payload, the version, and `weights_sha256`: the digest of the policy's weights laid out as
the weights blob of that version, so it equals the sha256 Redis keeps for the version),
then the payload, `torch.save` of the state (plain data only, read back with
`weights_only=True`). A reader checks the magic, the size and the sha256 before it unpickles
a byte, so a truncated, empty, random or bit-flipped file is refused as damaged, never
loaded.

Writing: the new file goes to a temp file, is flushed to the disk and read back and
verified, and only then renamed over the current one; the current one is kept beside it as
`ckpt.prev.pt` (a hard link swapped in atomically), so at every instant the run dir holds a
whole checkpoint, and the one before it.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ppomq.core.rundir import CHECKPOINT_FILE, write_bytes_atomic
from ppomq.proto import pack_weights

CKPT_NAME = CHECKPOINT_FILE
PREVIOUS_NAME = "checkpoints/ckpt.prev.pt"
MAGIC = b"ppomq.checkpoint/2\n"
# Checkpoints written before the checksummed layout: torch's own zip format.
_LEGACY_MAGIC = b"PK\x03\x04"


class CheckpointDamaged(Exception):
    """A checkpoint that must not be trusted; `reason` says why, in a few words."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    state: dict[str, Any]
    # None for a checkpoint from before checksums (nothing to compare its weights with).
    weights_sha256: str | None


def weights_digest(tensors: dict[str, np.ndarray]) -> str:
    """The sha256 a weights blob of these tensors carries (proto/WEIGHTS.md): the same
    bytes the learner publishes, so a checkpoint's weights compare with Redis's version."""
    header, _ = pack_weights(0, tensors)
    return header.sha256


def write_checkpoint(path: Path, state: dict[str, Any], *, weights_sha256: str) -> Path:
    """Write `state` to `path` as above; OSError (a full disk) leaves the old file whole."""
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    meta = {
        "sha256": hashlib.sha256(payload).hexdigest(),
        "size": len(payload),
        "version": int(state["version"]),
        "weights_sha256": weights_sha256,
    }
    data = MAGIC + json.dumps(meta).encode() + b"\n" + payload
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_bytes_atomic(
        path,
        data,
        keep_previous=path.parent / Path(PREVIOUS_NAME).name,
        verify=_verified_payload,  # what reached the disk verifies before it replaces any
    )


def read_checkpoint(path: Path) -> Checkpoint:
    """The verified checkpoint at `path`; CheckpointDamaged if any check fails."""
    found = _verified_payload(path)
    if found is None:  # written before checksums: torch's own format, unpickled safely
        return Checkpoint(path, _unpickle(path, path.read_bytes()), None)
    payload, weights_sha = found
    return Checkpoint(path, _unpickle(path, payload), weights_sha)


def _verified_payload(path: Path) -> tuple[memoryview, str] | None:
    """The payload and weights digest of a checkpoint file whose magic, size and sha256
    check out (None: a file from before checksums); CheckpointDamaged otherwise."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointDamaged(path, f"unreadable ({exc.strerror})") from None
    if data.startswith(_LEGACY_MAGIC):
        return None
    if not data:
        raise CheckpointDamaged(path, "empty file")
    if not data.startswith(MAGIC):
        raise CheckpointDamaged(path, "not a ppomq checkpoint (no checkpoint header)")
    head_end = data.find(b"\n", len(MAGIC))
    try:
        meta = json.loads(data[len(MAGIC) : head_end]) if head_end > 0 else None
        size, sha, weights_sha = int(meta["size"]), str(meta["sha256"]), meta["weights_sha256"]
    except (ValueError, TypeError, KeyError):
        raise CheckpointDamaged(path, "its header is damaged") from None
    payload = memoryview(data)[head_end + 1 :]
    if len(payload) != size:
        raise CheckpointDamaged(path, f"truncated: {len(payload)} of {size} bytes")
    if hashlib.sha256(payload).hexdigest() != sha:
        raise CheckpointDamaged(path, "its content does not match its sha256 (corrupted)")
    return payload, str(weights_sha)


def _unpickle(path: Path, payload: bytes | memoryview) -> dict[str, Any]:
    """torch's weights-only unpickler: a file that needs more of pickle could run code."""
    try:
        with warnings.catch_warnings():  # a crafted file's pickle protocol: not for the user
            warnings.filterwarnings("ignore", module=r"torch\._weights_only_unpickler")
            state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights only" in str(exc).lower():
            raise CheckpointDamaged(
                path, "loading it would need unpickling arbitrary code, which ppomq refuses"
            ) from None
        raise CheckpointDamaged(path, "not a torch file") from None
    except Exception as exc:  # the safe unpickler fails on junk in many ways
        raise CheckpointDamaged(path, f"does not load ({type(exc).__name__})") from None
    if not isinstance(state, dict) or not {"trainer", "version", "counters"} <= state.keys():
        raise CheckpointDamaged(path, "not a ppomq learner checkpoint (fields missing)")
    return state


def load_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    """The run dir's verified checkpoint; None if it has none; CheckpointDamaged."""
    path = Path(run_dir) / CKPT_NAME
    if not path.exists():
        return None
    return read_checkpoint(path)


def load_previous(run_dir: str | Path) -> Checkpoint | None:
    """The checkpoint kept from before the current one, if it is there and verifies."""
    path = Path(run_dir) / PREVIOUS_NAME
    if not path.exists():
        return None
    try:
        return read_checkpoint(path)
    except CheckpointDamaged:
        return None
