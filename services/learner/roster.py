"""Which actors the learner is waiting for: the ones it has heard from recently.

The learner never needs to know how many actors exist. An actor is *live* while its last
batch is at most `timeout_s` old; an update waits for the live ones only, so an actor that
is gone (killed, scaled away, cut off) holds training up for at most `timeout_s`, once,
and one that comes back (or a new one) counts again from its first batch.

Before the learner has heard from anyone, and for `timeout_s` after its first batch (the
*discovery window*), it also waits for `hint` actors: at start-up the actors do not all
send their first batch at the same instant, and an update on the first arrival alone would
be a smaller, noisier one than the user asked for.

An actor is a *member* once a batch of it has been trained on (`heard`). An id never
trained on whose batch only just missed an update (`joining`: a new actor that started
mid-version) is waited for too, so that in sync mode its next batch makes the quorum
rather than missing it again; but that is all a made-up id can claim too, for free, so it
is rationed: only while fewer members are live than the `hint` (a replacement for an
actor that is gone), one id per vacancy, each id once, for at most `timeout_s`; and a
newcomer that sent nothing trainable in that time closes the door to newcomers for
JOIN_COOLDOWN_TIMEOUTS x `timeout_s`. So made-up ids never hold up a run that has its
hinted actors, and hold up one short of them for at most `timeout_s` per cool-down. A
newcomer beyond the hint joins with its first batch that makes an update.

Silence is what an actor owes and does not send, so two waits for the learner do not
count: the learner's own update, publish and records (measured on its receiving clock,
ReceivingClock), and the time an actor that has sent all it may for the current version
(flow control: `waiting`) waits for the next one while others' batches are awaited. A 9 s
update would otherwise read as 9 s of silence from every actor, after every update.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("ppomq.learner")

# After a newcomer was waited for in vain (a made-up id, or an actor that died at once),
# newcomers are not waited for during this many actor timeouts: a stream of made-up ids
# then costs at most one timeout in this many.
JOIN_COOLDOWN_TIMEOUTS = 10


class ReceivingClock:
    """A monotonic clock that stands still while the learner is busy (`busy()`): what
    actors' silence is told by, so that only time the learner spent receiving counts."""

    def __init__(self, base: Callable[[], float] = time.monotonic) -> None:
        self.base = base
        self._busy_s = 0.0  # busy time before the current busy spell
        self._busy_since: float | None = None

    def __call__(self) -> float:
        now = self.base() if self._busy_since is None else self._busy_since
        return now - self._busy_s

    @contextmanager
    def busy(self) -> Iterator[None]:
        """The clock stops for the block (the learner's update and publish)."""
        self._busy_since = self.base()
        try:
            yield
        finally:
            self._busy_s += self.base() - self._busy_since
            self._busy_since = None


class ActorRoster:
    """Last-heard times of actors; `expected()` and `quorum()` say whom to wait for."""

    def __init__(
        self, *, timeout_s: float, hint: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_s = timeout_s
        self.hint = hint
        self.clock = clock
        self._last_heard: dict[str, float] = {}  # members: trained on
        self._silent: set[str] = set()
        self._first_heard: float | None = None
        self._joining: dict[str, float] = {}  # newcomers waited for, since when
        self._tried: set[str] = set()  # newcomers waited for once already
        self._waiting: set[str] = set()  # members that sent all they may for this version
        self._doors_closed_until = float("-inf")

    def heard(self, actor_id: str) -> None:
        """A batch of `actor_id` was trained on (now or before): it is a member."""
        now = self.clock()
        if self._first_heard is None:
            self._first_heard = now
        if actor_id in self._silent:
            self._silent.discard(actor_id)
            log.info("actor %s is back after %.1f s", actor_id, now - self._last_heard[actor_id])
        self._last_heard[actor_id] = now
        self._joining.pop(actor_id, None)

    def waiting(self, actor_id: str) -> None:
        """Member `actor_id` has sent all it may for the current version (flow control):
        until the next one it waits for the learner, and is live, not silent."""
        if actor_id in self._last_heard:
            self._waiting.add(actor_id)

    def new_version(self) -> None:
        """A new version is out: the actors that waited for it owe a batch again, and their
        silence counts from now."""
        now = self.clock()
        for actor_id in self._waiting:
            if actor_id in self._last_heard:
                self._last_heard[actor_id] = now
        self._waiting.clear()

    def joining(self, actor_id: str) -> bool:
        """A batch under an id never trained on only just missed an update: wait for that
        id's next batch if a vacancy below the hint is free (see the module's docstring).
        True when it is now waited for."""
        now = self.clock()
        self._expire_joiners(now)
        if actor_id in self._last_heard or actor_id in self._joining or actor_id in self._tried:
            return False
        if now < self._doors_closed_until:
            return False
        if len(self._live_members(now)) + len(self._joining) >= self.hint:
            return False
        self._joining[actor_id] = now
        self._tried.add(actor_id)
        log.info("actor %s joined mid-version: updates wait for its next batch", actor_id)
        return True

    def _live_members(self, now: float) -> set[str]:
        return {a for a, heard in self._last_heard.items() if now - heard <= self.timeout_s}

    def _expire_joiners(self, now: float) -> None:
        for actor_id, since in list(self._joining.items()):
            if now - since > self.timeout_s:
                del self._joining[actor_id]
                self._doors_closed_until = now + JOIN_COOLDOWN_TIMEOUTS * self.timeout_s
                log.warning(
                    "actor %s sent no batch that could be trained on in %.1f s after joining: "
                    "updates no longer wait for it, nor for other newcomers for %.0f s",
                    actor_id, now - since, JOIN_COOLDOWN_TIMEOUTS * self.timeout_s,
                )  # fmt: skip

    def live(self) -> set[str]:
        """Actors updates wait for: members heard from within `timeout_s`, and newcomers
        waited for (`joining`); logs each member that just fell silent."""
        now = self.clock()
        live = set()
        for actor_id, heard in self._last_heard.items():
            if actor_id in self._waiting or now - heard <= self.timeout_s:
                live.add(actor_id)
            elif actor_id not in self._silent:
                self._silent.add(actor_id)
                log.warning(
                    "actor %s silent for %.1f s of the learner's waiting (its updates not "
                    "counted): updates no longer wait for it (it rejoins with its next batch)",
                    actor_id, now - heard,
                )  # fmt: skip
        self._expire_joiners(now)
        return live | set(self._joining)

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
            self.drop(actor_id)
        return gone

    def drop(self, actor_id: str) -> None:
        """Forget one actor (the learner no longer keeps state for it): also what bounds
        the newcomers remembered, as the learner's ledger bounds the ids it keeps."""
        self._last_heard.pop(actor_id, None)
        self._silent.discard(actor_id)
        self._joining.pop(actor_id, None)
        self._tried.discard(actor_id)
        self._waiting.discard(actor_id)
