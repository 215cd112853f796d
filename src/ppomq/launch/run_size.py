"""How much disk a run dir takes, and what takes it, for the end of `ppomq train`."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

# The parts worth naming: the rest (logs, CSVs, TensorBoard, keys) is small beside them.
PARTS = {"redis": "weight versions in Redis", "checkpoints": "checkpoints"}


def tree_bytes(path: Path) -> int:
    """Bytes of the files under `path` (a file: its own); what cannot be read counts 0."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def megabytes(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def run_dir_size_line(run_dir: Path, keep_versions: int) -> str:
    """'run dir size: 129.0 MB (weight versions in Redis 82.1 MB, checkpoints 40.2 MB);
    --keep-versions 20 ...': the whole, its two big parts, and the setting that bounds the
    biggest."""
    parts = ", ".join(
        f"{words} {megabytes(tree_bytes(run_dir / name))}"
        for name, words in PARTS.items()
        if (run_dir / name).exists()
    )
    return (
        f"  run dir size: {megabytes(tree_bytes(run_dir))}"
        + (f" ({parts})" if parts else "")
        + f"; Redis keeps the newest {keep_versions} versions (--keep-versions N keeps fewer)"
    )
