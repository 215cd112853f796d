"""Warm stop on the first SIGTERM/SIGINT, fast stop on the second (rq's worker semantics).

Services check `requested` between units of work (a rollout, an update): the first signal
lets the current one finish (and the learner checkpoint). The second raises `FastStop` in
the main thread, wherever it is, so the service's `finally` blocks still run (sockets
closed, checkpoint and summary written) but nothing else does: no final evaluation, no
waiting for the unit of work. Signals after that are ignored, so they cannot cut the
cleanup short; a process that must die now gets SIGKILL.

A service stopped by a signal before its run finished exits 128 + the signal's number
(143 for SIGTERM, 130 for SIGINT: what a shell reports for a process a signal ended), not
0: whoever restarts it (a Kubernetes Job, compose's `restart: on-failure`) must not read
"stopped halfway" as "done". Only a finished run exits 0 (`WarmStop.exit_code`).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("ppomq")


class FastStop(BaseException):
    """Raised by the second stop signal: clean up and exit now.

    A BaseException, like KeyboardInterrupt, so that `except Exception` in a service's
    retry loops does not swallow it."""


class WarmStop:
    """Install with `install()`; poll `requested`; `fast` tells a FastStop happened."""

    def __init__(
        self, what: str = "the current unit of work", on_request: Callable[[], None] | None = None
    ) -> None:
        self.requested = False
        self.fast = False
        self.signum: int | None = None  # the first stop signal, once one came
        self.what = what
        # For a service whose loop blocks on something other than this flag (a server's
        # poll loop): called on the first signal to wake it up.
        self.on_request = on_request
        self._shielded = 0

    def install(self) -> WarmStop:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if not self.requested:
            self.requested = True
            self.signum = signum
            log.info("%s received: finishing %s", name, self.what)
            if self.on_request is not None:
                self.on_request()
            return
        if self.fast:
            log.info("%s received: already stopping fast", name)
            return
        self.fast = True
        log.info("%s received again: stopping now (cleanup still runs)", name)
        if not self._shielded:
            raise FastStop

    def exit_code(self, *, finished: bool) -> int:
        """The service's exit code: 0 when its run finished (or no signal stopped it),
        else 128 + the first stop signal's number, even after a clean warm stop."""
        if finished or self.signum is None:
            return 0
        return 128 + self.signum

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """A block a second signal must not cut short (writing a checkpoint or a summary):
        inside it the signal only sets `fast`, which the code after it can check."""
        self._shielded += 1
        try:
            yield
        finally:
            self._shielded -= 1
