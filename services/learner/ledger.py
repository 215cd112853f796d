"""The rollout ledger: per actor, what it sent and what became of it at the learner.

Per actor id (one actor incarnation): `sent` (the `sent` field of the last header that
carried one: how many batches the actor had handed to its socket), `received` (messages of
it that reached the learner: valid ones, and invalid ones whose header names it),
`accepted` (trained on), `stale` (refused by the staleness gate), `duplicates` (`seq` not
above its last accepted one), `surplus` (valid, but not needed: dropped unread at the door
because the learner had more queued than it could use, the oldest queued batch making room
for the newest; or past its actor's share of a version, admission.py), `invalid` (by
reason: refused at decode, or a batch from a future version). It
adds up:

    received = accepted + stale + duplicates + surplus + sum(invalid)
    sent     = received + lost_in_flight     (for an actor whose headers carry `sent`)

lost in flight: handed to the actor's socket but never counted here: the actor killed
mid-send, a network partition, or a learner restart (what a dead learner received after
its last checkpoint). The totals count every actor ever seen, forgotten ones included.

`sent` is a claim, so it is bounded by what the learner saw: it is taken only from valid
batches (never from a message refused as invalid), and at most `seq` + 1 (`seq` rises with
every message an actor sends, from 0, so no actor has sent more). Refused messages that
name no actor (or that a flood left no room to attribute) are in the totals under their
own line, `unattributed` by reason, so that the totals count every refusal.

Bounded: an actor not heard from for `forget_after_s` is forgotten, and beyond
`max_actors` one is dropped (`actors_forgotten`, `actors_dropped_over_cap`): the least
recently heard of those never trained on, so that a flood of made-up ids pushes out only
its own kind, and the least recently heard of all once every tracked actor has been
trained on; the caller drops its own per-actor state for the ids
`prune`/`note` return. Pure: no I/O, no threads; the clock is injectable for tests.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

LOST_IN_FLIGHT_MEANS = (
    "sent - received: batches an actor handed to its socket that the learner never "
    "counted: actor killed mid-send, partition, learner restart"
)


def _row() -> dict[str, Any]:
    return {"sent": None, "received": 0, "accepted": 0, "stale": 0, "duplicates": 0,
            "surplus": 0, "invalid": {}, "lost_in_flight": 0, "last_seen": 0.0}  # fmt: skip


def _lost(row: dict[str, Any]) -> int:
    sent = row["sent"]
    return max(0, sent - row["received"]) if sent is not None else 0


class RolloutLedger:
    """Per-actor counts of batches sent/received/accepted/refused, bounded in actors."""

    def __init__(
        self,
        *,
        max_actors: int = 1024,
        forget_after_s: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_actors = max_actors
        self.forget_after_s = forget_after_s
        self.clock = clock
        self.actors: OrderedDict[str, dict[str, Any]] = OrderedDict()  # least recent first
        self._untrained: OrderedDict[str, None] = OrderedDict()  # no batch accepted yet
        self.totals: dict[str, Any] = self._zero_totals()

    @staticmethod
    def _zero_totals() -> dict[str, Any]:
        return {"sent": 0, "received": 0, "accepted": 0, "stale": 0, "duplicates": 0,
                "surplus": 0, "invalid": {}, "lost_in_flight": 0, "actors_seen": 0,
                "actors_trained": 0, "actors_forgotten": 0,
                "actors_dropped_over_cap": 0, "unattributed": {}}  # fmt: skip

    # ------------------------------------------------------------------ recording

    def note(
        self, actor_id: str, outcome: str, *, sent: int | None = None, seq: int | None = None
    ) -> list[str]:
        """One message of `actor_id` reached the learner: `outcome` is "accepted", "stale",
        "duplicate", "surplus" or an invalid reason; `sent` and `seq` as the batch says (None
        for a message refused as invalid). Returns the ids dropped over the cap (the caller
        drops its own state for them)."""
        if sent is not None:
            sent = None if seq is None else min(sent, seq + 1)
        row = self.actors.get(actor_id)
        if row is None:
            row = self.actors[actor_id] = _row()
            self._untrained[actor_id] = None
            self.totals["actors_seen"] += 1
        else:
            self.actors.move_to_end(actor_id)
            if actor_id in self._untrained:
                self._untrained.move_to_end(actor_id)
        t = self.totals
        lost_before = row["lost_in_flight"]
        if sent is not None and (row["sent"] is None or sent > row["sent"]):
            t["sent"] += sent - (row["sent"] or 0)
            row["sent"] = sent
        row["received"] += 1
        t["received"] += 1
        if outcome == "accepted":
            if row["accepted"] == 0:
                t["actors_trained"] += 1
                self._untrained.pop(actor_id, None)
            row["accepted"] += 1
            t["accepted"] += 1
        elif outcome in ("stale", "duplicate", "surplus"):
            key = "duplicates" if outcome == "duplicate" else outcome
            row[key] += 1
            t[key] += 1
        else:
            row["invalid"][outcome] = row["invalid"].get(outcome, 0) + 1
            t["invalid"][outcome] = t["invalid"].get(outcome, 0) + 1
        row["lost_in_flight"] = _lost(row)
        t["lost_in_flight"] += row["lost_in_flight"] - lost_before
        row["last_seen"] = self.clock()
        return self._over_cap()

    def note_unattributed(self, reason: str, count: int = 1) -> None:
        """`count` refused messages that no actor's row holds."""
        bucket = self.totals["unattributed"]
        bucket[reason] = bucket.get(reason, 0) + count

    def _over_cap(self) -> list[str]:
        dropped: list[str] = []
        while len(self.actors) > self.max_actors:
            if self._untrained:
                gone, _ = self._untrained.popitem(last=False)
                del self.actors[gone]
            else:
                gone, _ = self.actors.popitem(last=False)
            self.totals["actors_dropped_over_cap"] += 1
            dropped.append(gone)
        return dropped

    def prune(self) -> list[str]:
        """Forget actors not heard from for `forget_after_s`; returns their ids."""
        cutoff = self.clock() - self.forget_after_s
        gone: list[str] = []
        while self.actors:
            actor_id, row = next(iter(self.actors.items()))
            if row["last_seen"] >= cutoff:
                break
            del self.actors[actor_id]
            self._untrained.pop(actor_id, None)
            gone.append(actor_id)
        self.totals["actors_forgotten"] += len(gone)
        return gone

    # ------------------------------------------------------------------ reading

    def rejected(self, row: dict[str, Any]) -> int:
        return row["stale"] + row["duplicates"] + sum(row["invalid"].values())

    def dropped(self, row: dict[str, Any]) -> int:
        """Valid batches not trained on for want of room: `surplus`, not a rejection."""
        return int(row.get("surplus", 0))

    def summary(self) -> dict[str, Any]:
        """What summary.json's `ledger` holds: per actor, totals, what lost means."""
        return {
            "actors": {
                k: {kk: v for kk, v in row.items() if kk != "last_seen"}
                for k, row in sorted(self.actors.items())
            },
            "totals": self.totals_view(),
            "lost_in_flight_means": LOST_IN_FLIGHT_MEANS,
            "max_actors": self.max_actors,
            "forget_after_s": self.forget_after_s,
        }

    def totals_view(self) -> dict[str, Any]:
        t = dict(self.totals)
        t["invalid"] = dict(t["invalid"])
        t["unattributed"] = dict(t["unattributed"])
        t["rejected"] = self.rejected(t)
        t["actors_tracked"] = len(self.actors)
        return t

    # ------------------------------------------------------------------ checkpoint

    def get_state(self) -> dict[str, Any]:
        return {
            "actors": [[k, dict(v, invalid=dict(v["invalid"]))] for k, v in self.actors.items()],
            "totals": dict(
                self.totals,
                invalid=dict(self.totals["invalid"]),
                unattributed=dict(self.totals["unattributed"]),
            ),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.actors = OrderedDict()
        for actor_id, row in state.get("actors", []):
            self.actors[str(actor_id)] = dict(_row(), **row)
        untrained = [k for k, row in self.actors.items() if not row["accepted"]]
        self._untrained = OrderedDict.fromkeys(untrained)
        self.totals = dict(self._zero_totals(), **state.get("totals", {}))
        # A checkpoint written under a larger cap: the same rule drops the excess now.
        self._over_cap()
