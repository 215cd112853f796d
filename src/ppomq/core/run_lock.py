"""One process at a time in a run dir: an exclusive lock on RUN_DIR/.lock, naming its pid.

Two `ppomq train` in one run dir would append to the same CSVs, checkpoints and Redis data
and corrupt each other's run. The lock is `flock(2)` on a file in the run dir, so the
kernel drops it with the process however it ends: a killed run never leaves a lock held.
A run that ends normally also removes the file, so a run dir at rest holds only the run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ppomq.core.errors import UsageError

LOCK_FILE = ".lock"


class RunDirLock:
    """Held from construction until `release()` or the process's end."""

    def __init__(self, run_dir: Path, *, holder: str) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise UsageError(
                    f"{run_dir} is in use by another run (pid {other}); wait for it to end, "
                    "or pass another --run-dir"
                ) from None
            if self._same_file(fd):
                self._fd = fd
            else:
                # The holder released (and removed) the file between our open and our
                # flock: the lock taken is on a file no one else will open. Take the new one.
                os.close(fd)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()} {holder}\n".encode(), 0)

    def _same_file(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._fd is not None:
            # Removed while still held: whoever opens the path next makes a new file and
            # locks that; one that opened the old file first sees it gone (_same_file).
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
