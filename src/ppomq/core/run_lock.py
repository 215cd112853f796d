"""One process at a time in a run dir: an exclusive lock on RUN_DIR/.lock, naming its pid.

Two `ppomq train` in one run dir would append to the same CSVs, checkpoints and Redis data
and corrupt each other's run. The lock is `flock(2)` on a file in the run dir, so the
kernel drops it with the process however it ends: a killed run never leaves a stale lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ppomq.core.errors import UsageError

LOCK_FILE = ".lock"


class RunDirLock:
    """Held from construction until `release()` or the process's end."""

    def __init__(self, run_dir: Path, *, holder: str) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(self._fd, 200, 0).decode(errors="replace").strip() or "unknown"
            self.release()
            raise UsageError(
                f"{run_dir} is in use by another run (pid {other}); wait for it to end, or "
                "pass another --run-dir"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()} {holder}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
