"""Grants: how many batches each actor may sample with a version.

The learner owns the update, so it says per version what it will train on, and actors
sample that and no more (proto/WEIGHTS.md `actor.grants`). The update-size rule is one
setting, --batch-samples:

- 0, per actor (the default): every actor may send --batches-per-version batches with
  each version, and an update takes a batch from every live actor, and whatever else is
  queued. Each batch sampled is one an update takes, whatever the replica count; the
  update grows with the actors, as a synchronous learner's does.
- N > 0, fixed samples: an update trains N samples whatever number of actors is live.
  Per version only the batches the next updates need are granted (`fixed_grants`): the
  batches of one update, and with --batches-per-version k > 1 those of the next k - 1
  (within --max-staleness: actors sample while the learner trains), less the batches
  granted and not yet arrived and those queued. They go to the known actors granted
  least recently, one each.
  An actor the learner does not know (new, or back) is granted nothing while the known
  ones cover the updates (at the start nobody is known, and each may send one); it says
  hello (proto/ROLLOUT.md "Hello") while it holds no grant, which makes it known and tells
  the learner an idle actor is alive, so a granted batch never goes to one that is gone.

The GrantBook is what the receiving thread and the training thread share: the training
thread sets each version's grants; the receiving thread counts each actor's batches
against its grant before decoding them (an actor's ungranted batches, a flood's, cost a
header read) and records hellos.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Grants:
    """One version's grants: batches per listed actor, and for any actor not listed."""

    actors: Mapping[str, int] = field(default_factory=dict)
    others: int = 0

    def of(self, actor_id: str) -> int:
        return int(self.actors.get(actor_id, self.others))

    def header(self) -> dict[str, Any]:
        """The weights header's `actor.grants`."""
        return {"actors": dict(self.actors), "others": int(self.others)}


def per_actor_grants(share: int) -> Grants:
    """Every actor, known or not, may send `share` batches with the version."""
    return Grants({}, share)


def batches_needed(update_samples: int, batch_samples: int) -> int:
    """Whole batches of `batch_samples` an update of `update_samples` takes."""
    return max(1, math.ceil(update_samples / max(1, batch_samples)))


def fixed_grants(
    *, known: Sequence[str], pending: Mapping[str, int], wanted: int, cap: int
) -> Grants:
    """`wanted` batches over the `known` actors (least recently granted first) that have
    none pending: one each, then a second each, and so on up to `cap` per actor. Every
    known actor is listed (0: wait for the next version). Actors not known get one batch
    while the known ones cannot fill `wanted` (at the start, nobody is known), else none:
    they say hello, and a later version grants them."""
    out = {actor_id: 0 for actor_id in known}
    idle = [a for a in known if not pending.get(a, 0)]
    left = max(0, wanted)
    for _ in range(max(0, cap)):
        for actor_id in idle:
            if left == 0:
                return Grants(out, 0)
            out[actor_id] += 1
            left -= 1
    return Grants(out, 1 if left else 0)


@dataclass
class _Actor:
    heard: float  # its last batch or hello, on the book's clock
    granted_at: int = -1  # the newest version that granted it any
    granted: int = 0  # how many, at that version
    arrived: int = 0  # of its batches at that version
    overdrawn: float = -math.inf  # its last batch beyond its grant, on the book's clock


class GrantBook:
    """Each version's grants and each actor's batches against them, under one lock.

    Versions older than the staleness bound are forgotten (`forget_below`); at most
    `max_actors` actors are kept, the least recently heard dropped first, so made-up ids
    cannot grow it."""

    def __init__(
        self,
        *,
        timeout_s: float,
        max_actors: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_actors = max_actors
        self.clock = clock
        self._lock = threading.Lock()
        self._grants: dict[int, Grants] = {}
        self._taken: dict[tuple[str, int], int] = {}
        self._actors: dict[str, _Actor] = {}
        self._open_at: int | None = None

    def set(self, version: int, grants: Grants) -> None:
        """The grants published with `version` (before any actor can hold it)."""
        with self._lock:
            self._grants[version] = grants
            self._open_at = None
            for actor_id, n in grants.actors.items():
                actor = self._actors.get(actor_id)
                if actor is not None and n:
                    actor.granted_at, actor.granted, actor.arrived = version, n, 0

    def of(self, actor_id: str, version: int) -> int | None:
        """What `actor_id` was granted with `version`; None when no grants are on record."""
        with self._lock:
            grants = self._grants.get(version)
        return None if grants is None else grants.of(actor_id)

    def may(self, actor_id: str, version: int) -> bool:
        """Whether a batch of `actor_id` sampled with `version` is within its grant (a
        version with no grants on record, older than this learner, is not held to any).
        Only asked: a message is held to the grant once it has proved valid (`take`), so
        junk under an actor's id never uses up that actor's grant."""
        with self._lock:
            if self._within(actor_id, version):
                return True
            if len(self._actors) < self.max_actors:
                self._heard(actor_id)  # an actor that does not read grants is still there
            actor = self._actors.get(actor_id)
            if actor is not None:
                actor.overdrawn = self.clock()
            return False

    def overdrawn(self) -> set[str]:
        """The actors that sent a batch beyond their grant within `timeout_s`. Updates do
        not wait for them: such an actor does not wait for grants (a flood), and its batch
        of the current version queues at the door behind its ungranted ones."""
        now = self.clock()
        with self._lock:
            return {a for a, x in self._actors.items() if now - x.overdrawn <= self.timeout_s}

    def take(self, actor_id: str, version: int) -> bool:
        """A valid batch of `actor_id` sampled with `version`: counted against its grant
        (True when the grant covers it), and the actor is heard from."""
        with self._lock:
            if not self._within(actor_id, version):
                return False
            key = (actor_id, version)
            if version in self._grants:
                self._taken[key] = self._taken.get(key, 0) + 1
            actor = self._heard(actor_id)
            if actor.granted_at == version:
                actor.arrived += 1
            return True

    def _within(self, actor_id: str, version: int) -> bool:
        grants = self._grants.get(version)
        if grants is None:
            return True
        # Starving, the learner takes one more batch of each actor (a resend).
        extra = 1 if self._open_at == version else 0
        return self._taken.get((actor_id, version), 0) < grants.of(actor_id) + extra

    def open(self, version: int) -> None:
        """The learner holds nothing and nothing has arrived for a while: the batches it
        granted are lost (a restart, a network cut) or their actors gone. Until the next
        version, each actor's next batch with `version` is taken beyond its grant: actors
        send one when no newer version came for their resend timeout (flow_control.py)."""
        with self._lock:
            self._open_at = version

    def hello(self, actor_id: str) -> None:
        """An actor without a grant says it is there."""
        with self._lock:
            self._heard(actor_id)

    def _heard(self, actor_id: str) -> _Actor:
        now = self.clock()
        actor = self._actors.get(actor_id)
        if actor is None:
            if len(self._actors) >= self.max_actors:
                oldest = min(self._actors, key=lambda a: self._actors[a].heard)
                del self._actors[oldest]
            actor = self._actors[actor_id] = _Actor(heard=now)
        actor.heard = now
        return actor

    def plan_inputs(self) -> tuple[list[str], dict[str, int]]:
        """The actors heard from within `timeout_s` or with a batch still owed, least
        recently granted first, and per actor the batches granted and not yet arrived (at
        most one: an actor given a newer version takes it before its next batch, so only
        the batch it was sampling can still come of an older grant)."""
        now = self.clock()
        with self._lock:
            live: list[tuple[int, str]] = []
            pending: dict[str, int] = {}
            for actor_id, a in self._actors.items():
                owed = min(1, max(0, a.granted - a.arrived))
                if now - a.heard > self.timeout_s:
                    continue  # gone: what it owed is given to others
                live.append((a.granted_at, actor_id))
                if owed:
                    pending[actor_id] = owed
            return [a for _, a in sorted(live)], pending

    def forget_below(self, version: int) -> None:
        """Batches of versions below `version` are stale: their grants no longer matter."""
        with self._lock:
            for v in [v for v in self._grants if v < version]:
                del self._grants[v]
            for key in [k for k in self._taken if k[1] < version]:
                del self._taken[key]

    def forget(self, actor_id: str) -> None:
        with self._lock:
            self._actors.pop(actor_id, None)
