"""Which actors the learner is waiting for: the ones it has heard from recently.

The learner never needs to know how many actors exist. An actor is *live* while its last
batch is at most `timeout_s` old; an update waits for the live ones only, so an actor that
is gone (killed, scaled away, cut off) holds training up for at most `timeout_s`, once,
and one that comes back (or a new one) counts again from its first batch.

Before the learner has heard from anyone, and for `timeout_s` after its first batch (the
*discovery window*), it also waits for `hint` actors: at start-up the actors do not all
send their first batch at the same instant, and an update on the first arrival alone would
be a smaller, noisier one than the user asked for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("ppomq.learner")


class ActorRoster:
    """Last-heard times of actors; `expected()` and `quorum()` say whom to wait for."""

    def __init__(
        self, *, timeout_s: float, hint: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_s = timeout_s
        self.hint = hint
        self.clock = clock
        self._last_heard: dict[str, float] = {}
        self._silent: set[str] = set()
        self._first_heard: float | None = None

    def heard(self, actor_id: str) -> None:
        now = self.clock()
        if self._first_heard is None:
            self._first_heard = now
        if actor_id in self._silent:
            self._silent.discard(actor_id)
            log.info("actor %s is back after %.1f s", actor_id, now - self._last_heard[actor_id])
        self._last_heard[actor_id] = now

    def live(self) -> set[str]:
        """Actors heard from within `timeout_s`; logs each that just fell silent."""
        now = self.clock()
        live = set()
        for actor_id, heard in self._last_heard.items():
            if now - heard <= self.timeout_s:
                live.add(actor_id)
            elif actor_id not in self._silent:
                self._silent.add(actor_id)
                log.warning(
                    "actor %s silent for %.1f s: updates no longer wait for it (it rejoins "
                    "with its next batch)", actor_id, now - heard,
                )  # fmt: skip
        return live

    def discovering(self) -> bool:
        first = self._first_heard
        return first is None or self.clock() - first < self.timeout_s

    def expected(self) -> int:
        """How many actors' batches one update waits for (at least one)."""
        live = len(self.live())
        return max(live, self.hint) if self.discovering() else max(live, 1)

    def quorum(self, contributed: set[str]) -> bool:
        """Sync mode: every live actor has contributed (and, while discovering, `hint`)."""
        if not contributed or not self.live() <= contributed:
            return False
        return not self.discovering() or len(contributed) >= self.hint

    def forget(self, older_than_s: float) -> list[str]:
        """Drop actors not heard from for `older_than_s`; returns their ids."""
        now = self.clock()
        gone = [a for a, t in self._last_heard.items() if now - t > older_than_s]
        for actor_id in gone:
            del self._last_heard[actor_id]
            self._silent.discard(actor_id)
        return gone

    def drop(self, actor_id: str) -> None:
        """Forget one actor (the learner no longer keeps state for it)."""
        self._last_heard.pop(actor_id, None)
        self._silent.discard(actor_id)
