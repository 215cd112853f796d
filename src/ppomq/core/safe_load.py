"""Loading torch files without running code: `torch.load(..., weights_only=True)`.

A ppomq file (final weights, an exported version, a learner checkpoint) holds only tensors
and plain containers. Anything that needs more of pickle could run any code as it loads,
so it is refused, as is junk, with one line naming the file and what to do instead.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

from ppomq.core.errors import UsageError


def load_plain(path: str | Path, *, what: str, fix: str) -> Any:
    """`path` read with torch's weights-only unpickler; a UsageError "`path` is not `what`
    ...; `fix`" if it is not a torch file of plain data."""
    try:
        with warnings.catch_warnings():  # a crafted file's pickle protocol: not for the user
            warnings.filterwarnings("ignore", module=r"torch\._weights_only_unpickler")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights only" in str(exc).lower():
            raise UsageError(
                f"{path} is not {what}: loading it would need unpickling arbitrary code, "
                f"which ppomq refuses; {fix}"
            ) from None
        raise UsageError(f"{path} is not {what} (not a torch file); {fix}") from None
    except Exception as exc:  # the safe unpickler fails on junk in many ways
        raise UsageError(f"{path} is not {what} ({type(exc).__name__}); {fix}") from None
