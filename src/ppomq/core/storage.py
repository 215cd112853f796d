"""A full disk or a read-only mount, recognised wherever it surfaces: an OSError from a
file the run writes, or Redis refusing writes because it cannot persist them (MISCONF).
Either becomes one StorageFullError naming the path, never a crash to restart."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import redis

from ppomq.core.errors import StorageFullError

# No space, no quota left, a read-only file system: nothing a restart can change.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def storage_error(exc: BaseException, *, run_dir: str | Path) -> StorageFullError | None:
    """The one-line error for `exc` if it is a full or read-only disk, else None."""
    resume = f"free space there and run the same command again (--run-dir {run_dir}) to resume"
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        path = exc.filename or run_dir
        if exc.errno == errno.EROFS:
            return StorageFullError(f"cannot write {path}: the file system is read-only; "
                                    f"pass a writable --run-dir, or {resume}")  # fmt: skip
        return StorageFullError(f"cannot write {path}: the disk is full ({free_text(path)}); "
                                f"{resume}")  # fmt: skip
    # Alone, or as a pipeline's "Command # 1 (...) of pipeline caused error: MISCONF ...".
    if isinstance(exc, redis.ResponseError) and "MISCONF" in str(exc):
        detail = str(exc)[str(exc).index("MISCONF") :].splitlines()[0][:100]
        return StorageFullError(
            f"Redis cannot persist what it is sent ({detail}): the disk holding its data is "
            f"full or read-only; {resume}"
        )
    return None


def free_text(path: str | Path) -> str:
    """'N bytes free on PATH's file system', or '' when that cannot be read."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "free space unknown"
    return f"{free:,} bytes free"


def storage_text(run_dir: str | Path) -> str:
    """What the launcher says when a child stopped for a full disk and its own line could
    not be read (its log is on that disk)."""
    return (
        f"cannot write {run_dir}: the disk is full or read-only ({free_text(run_dir)}); free "
        f"space there and run the same command again (--run-dir {run_dir}) to resume"
    )
