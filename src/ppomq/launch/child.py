"""One supervised child of `ppomq train`, forked from the preloading server
(ppomq.launch.zygote)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerProcess
from pathlib import Path

from ppomq.launch import zygote


@dataclass
class Child:
    """One supervised process and how to start it again: `ppomq ARGV` with `env`, forked
    from the preloading server (ppomq.launch.zygote), logging to `log_path`."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: ForkServerProcess | None = field(default=None, repr=False)
    restarts: int = 0
    started_at: float = 0.0
    # Crash bookkeeping for supervise: when the pending restart is due, consecutive crashes
    # (the backoff exponent) and recent crash times (the give-up window).
    restart_at: float | None = None
    failures: int = 0
    crashes: deque[float] = field(default_factory=deque, repr=False)
    retired: bool = False  # exited and deliberately not restarted (--no-restart-actors)

    def start(self) -> None:
        self.restart_at = None
        self.started_at = time.monotonic()
        self.proc = zygote.fork(self.name, self.argv, self.env, self.log_path)

    def poll(self) -> int | None:
        """Exit code (negative: killed by that signal), None while running."""
        return None if self.proc is None else self.proc.exitcode

    def terminate(self) -> None:
        if self.proc is not None and self.proc.exitcode is None:
            self.proc.terminate()

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        self.proc.join(max(timeout, 0.01))
        if self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join()
        return self.proc.exitcode
