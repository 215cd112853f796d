"""torch state dicts <-> the numpy tensors of a weights message, and `.pt` export.

torch is imported inside the functions: the weightserver and the CLI's Redis verbs never
need it, and `import torch` costs about a second.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ppomq.proto.weights_blob import WeightsHeader, unpack_tensors

if TYPE_CHECKING:
    import torch


def state_dict_to_numpy(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """CPU numpy arrays for a torch state dict, ready for `pack_weights`.

    For CPU tensors the arrays share memory with the parameters (no copy here);
    `pack_weights` makes the one copy into the blob, so call it before the next update.
    """
    import torch

    out: dict[str, np.ndarray] = {}
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"state dict entry {name!r} is a {type(value).__name__}, not a tensor")
        if value.dtype == torch.bfloat16:
            # numpy has no bfloat16 and the wire format allows no lossy cast behind a user's
            # back; the caller decides (e.g. `.float()` the model before publishing).
            raise ValueError(f"tensor {name!r} is bfloat16, which the weights format lacks")
        out[name] = value.detach().to("cpu").contiguous().numpy()
    return out


def numpy_to_state_dict(
    arrays: Mapping[str, np.ndarray], *, copy: bool = True
) -> dict[str, torch.Tensor]:
    """torch tensors for `arrays` (e.g. from `unpack_tensors`), for `load_state_dict`.

    The arrays of a received message are read-only views of the frame; torch cannot wrap
    read-only memory safely, so by default each tensor gets its own copy. `copy=False`
    is for writable arrays only.
    """
    import torch

    if copy:
        return {name: torch.from_numpy(np.array(a, copy=True)) for name, a in arrays.items()}
    return {name: torch.from_numpy(a) for name, a in arrays.items()}


def weights_to_state_dict(header: WeightsHeader, blob: bytes | memoryview) -> dict[str, Any]:
    """The torch state dict of one weights message (tensors are copies)."""
    return numpy_to_state_dict(unpack_tensors(header, blob))


def export_metadata(header: WeightsHeader, run_id: str) -> dict[str, Any]:
    """The metadata saved beside the state dict: the header, in plain types."""
    meta = header.to_dict()
    meta["run_id"] = run_id
    return meta


def export_torch(
    path: str | os.PathLike[str], header: WeightsHeader, blob: bytes | memoryview, run_id: str
) -> Path:
    """Write `{"state_dict": ..., "metadata": ...}` so that `torch.load(path)` opens it.

    Only tensors and plain containers, so `torch.load(..., weights_only=True)` (torch's
    safe default) works. Written to a temporary file and renamed, so an interrupted
    export never leaves a half file under the name asked for.
    """
    import torch

    target = Path(path)
    payload = {
        "state_dict": weights_to_state_dict(header, blob),
        "metadata": export_metadata(header, run_id),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


__all__ = [
    "export_metadata",
    "export_torch",
    "numpy_to_state_dict",
    "state_dict_to_numpy",
    "weights_to_state_dict",
]
