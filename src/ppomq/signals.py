"""Warm stop on the first SIGTERM/SIGINT, cold stop on the second (rq's worker semantics).

Services check `requested` between units of work (a rollout, an update): the first signal
lets the current one finish (and the learner checkpoint); a second exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

log = logging.getLogger("ppomq")


class WarmStop:
    """Install with `install()`; poll `requested`."""

    def __init__(self, what: str = "the current unit of work") -> None:
        self.requested = False
        self.what = what

    def install(self) -> WarmStop:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.requested:
            os._exit(128 + signum)
        self.requested = True
        log.info("%s received: finishing %s", signal.Signals(signum).name, self.what)
