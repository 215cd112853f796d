"""Admission: which batches the learner trains on, and the one owner of per-actor state.

A batch reaches the training thread past the door (receiver.py); here it is checked again
(episodes, `seq`, the staleness gate) against the version about to train, and counted:
received, accepted or refused, per actor and in total. Per-actor state — the ledger's rows,
the roster's liveness, the last `seq`, the episode book, the status rows — lives here and
is forgotten here, all at once, when the ledger stops keeping an actor.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ppomq.learner.door import Door
from ppomq.learner.episodes import EpisodeBook
from ppomq.learner.ledger import RolloutLedger
from ppomq.learner.roster import ActorRoster
from ppomq.learner.staleness import StalenessGate
from ppomq.proto import DecodeError, Reason, RolloutBatch, SeqTracker


class Admission:
    """The staleness gate, the rollout ledger and the roster of live actors, fed by the
    training thread's batches and by the door's tally."""

    def __init__(
        self,
        *,
        max_staleness: int,
        actor_timeout_s: float,
        actors_hint: int,
        max_actors: int,
        forget_actor_after_s: float,
        door: Door,
        seqs: SeqTracker,
        book: EpisodeBook,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gate = StalenessGate(max_staleness)
        self.roster = ActorRoster(timeout_s=actor_timeout_s, hint=actors_hint, clock=clock)
        # Bounded: the ledger decides which actors are kept (--max-actors,
        # --forget-actor-after-s), and everything below follows it (forget).
        self.ledger = RolloutLedger(max_actors=max_actors, forget_after_s=forget_actor_after_s)
        self.door = door
        # Each actor's last accepted `seq`: the door checks against it, this checks again
        # and records it on acceptance.
        self.seqs = seqs
        # Each actor's episodes followed from its batches' own data (episodes.py), shared
        # with the door, which verifies most batches first.
        self.book = book
        # Per kept actor: what `ppomq status` and the summary show.
        self.actors: dict[str, dict[str, Any]] = {}
        self.produced_batches = 0  # valid batches received, accepted or not
        self.discarded_env_steps = 0  # their env steps when not trained on
        # Rejects by reason: the door's (this incarnation), and earlier incarnations'.
        self.door_rejects: dict[str, int] = {}
        self.door_rejects_before: Counter[str] = Counter()

    def admit(self, batch: RolloutBatch, version: int) -> bool:
        """Whether `batch` is trained on at `version`. It counts as received either way; only
        once accepted does anything it says count (its `seq`, its actor's liveness, but see
        _heard_if_known)."""
        steps = batch.num_steps * batch.num_envs
        self.produced_batches += 1
        refusal = self._refusal(batch, version)
        self.forget(self.ledger.note(batch.actor_id, refusal or "accepted", sent=batch.sent,
                                     seq=batch.seq))  # fmt: skip
        row = self.actors.setdefault(batch.actor_id, {"batches": 0, "env_steps": 0})
        row.update(
            last_seen=time.time(),
            policy_version=batch.policy_version,
            age=version - batch.policy_version,
            batches=row["batches"] + 1,
            weights_wait=batch.weights_wait,  # the actor's own figure (ROLLOUT.md); None: not sent
        )
        if refusal is not None:
            self.discarded_env_steps += steps
            row["discarded_env_steps"] = row.get("discarded_env_steps", 0) + steps
            self._heard_if_known(batch.actor_id, refusal, batch.policy_version, version)
            return False
        self.seqs.record(batch.actor_id, batch.seq)
        self.roster.heard(batch.actor_id)
        row["accepted"] = row.get("accepted", 0) + 1
        row["env_steps"] += steps
        return True

    def _refusal(self, batch: RolloutBatch, version: int) -> str | None:
        """The ledger's outcome for a refused batch; None when the gate lets it through.
        The episode check is for a batch that did not come through the door."""
        if batch.verified is None:
            try:
                self.book.verify(batch)
            except DecodeError as exc:
                self.gate.rejected[exc.reason.label] += 1
                return exc.reason.label
        try:
            # Again here, not only at the door: two queued batches of one actor.
            self.seqs.check(batch.actor_id, batch.seq)
        except DecodeError:
            self.gate.rejected[Reason.SEQ_NOT_INCREASING.label] += 1
            return "duplicate"
        if self.gate.admit(version, batch.policy_version):
            return None
        return "stale" if batch.policy_version <= version else "future_version"

    def _heard_if_known(
        self, actor_id: str, outcome: str, policy_version: int | None, version: int
    ) -> None:
        """A stale batch makes its actor one that updates wait for if the actor was trained
        on before, or if the batch only just missed an update (one version past the
        bound: an actor that joined mid-version): in sync mode its next batch, on the new
        version, is then taken rather than missing the quorum again. Any other refusal,
        and older batches under ids never trained on, do not: made-up ids would otherwise
        hold every update up for --actor-timeout-s. A just-missed batch is all a made-up id
        needs to claim too, so the roster rations those (ActorRoster.joining)."""
        if outcome != "stale":
            return
        row = self.ledger.actors.get(actor_id)
        trained = row is not None and row["accepted"] > 0
        just_missed = (
            policy_version is not None and version - policy_version <= self.gate.max_staleness + 1
        )
        if trained:
            self.roster.heard(actor_id)
        elif just_missed:
            self.roster.joining(actor_id)

    def forget(self, actor_ids: list[str]) -> None:
        """Drop every per-actor state of actors the ledger no longer keeps."""
        for actor_id in actor_ids:
            self.actors.pop(actor_id, None)
            self.roster.drop(actor_id)
            self.seqs.forget(actor_id)
            self.book.forget(actor_id)

    def take_door(self, version: int, *, ahead: int = 0) -> None:
        """Move the door's bounds to `version` and its tally into the counts and the ledger:
        its stale and surplus batches were received and discarded, as if refused here; its
        refusals that named a sender go under that actor (a door `seq_not_increasing` is a
        duplicate there), the others into the ledger's unattributed totals."""
        # One version of slack: a batch that only just missed an update reaches the gate
        # here, where it can make a newly joined actor live (_heard_if_known).
        # `ahead`: versions published before this learner holds them (a learner group's
        # rank 0 publishes as the other ranks end the same update).
        self.door.set_bounds(
            stale_below=version - self.gate.max_staleness - 1, future_above=version + ahead
        )
        tally = self.door.take()
        self.produced_batches += tally.discarded_batches
        self.discarded_env_steps += tally.discarded_env_steps
        self.door_rejects = tally.rejects
        for reason, count in tally.unattributed.items():
            self.ledger.note_unattributed(reason, count)
        for actor_id, reason, sent, seq in tally.attributed:
            outcome = "duplicate" if reason == Reason.SEQ_NOT_INCREASING.label else reason
            self.forget(self.ledger.note(actor_id, outcome, sent=sent, seq=seq))
            self._heard_if_known(actor_id, outcome, None, version)

    def rejects(self) -> dict[str, int]:
        """Every refusal by reason: the door's, earlier incarnations', and the gate's."""
        out = Counter(self.door_rejects)
        out.update(self.door_rejects_before)
        out.update(self.gate.rejected)
        return dict(out)

    def waste_ratio(self) -> float:
        return waste_ratio(self.produced_batches, self.gate.accepted)

    def counts(self) -> dict[str, Any]:
        """The counters a learner group adds up over its ranks (sum_counts) for the
        status, the metrics and the summary."""
        return {
            "batches_accepted": self.gate.accepted,
            "rejects": self.rejects(),
            "discarded_env_steps": self.discarded_env_steps,
            "batches_produced": self.produced_batches,
            "live_actors": len(self.roster.live()),
            "ledger": self.ledger.totals_view(),
            "policy_age_histogram": {str(k): v for k, v in sorted(self.gate.ages.items())},
        }

    def get_state(self) -> dict[str, Any]:
        """The checkpoint's share of admission (its keys are the checkpoint's counters)."""
        return {
            "produced_batches": self.produced_batches,
            "discarded_env_steps": self.discarded_env_steps,
            "decode_rejects": dict(Counter(self.door_rejects) + self.door_rejects_before),
            "gate": self.gate.get_state(),
            "actors": self.actors,
            "ledger": self.ledger.get_state(),
        }

    def set_state(self, counters: dict[str, Any]) -> None:
        self.produced_batches = int(counters.get("produced_batches", 0))
        self.discarded_env_steps = int(counters.get("discarded_env_steps", 0))
        self.door_rejects_before = Counter(counters.get("decode_rejects", {}))
        self.gate.set_state(counters.get("gate", {}))
        actors = dict(counters.get("actors", {}))
        if "ledger" in counters:
            self.ledger.set_state(counters["ledger"])
        else:  # a checkpoint from before the ledger: its actors, as far as they say
            recent = sorted(actors.items(), key=lambda kv: kv[1].get("last_seen", 0.0))
            self.ledger.set_state({"actors": [
                [k, {"received": int(v.get("batches", 0)), "accepted": int(v.get("accepted", 0)),
                     "last_seen": float(v.get("last_seen", 0.0))}] for k, v in recent
            ]})  # fmt: skip
        # Bounded: only the actors the ledger keeps (a checkpoint under a larger cap).
        self.actors = {k: v for k, v in actors.items() if k in self.ledger.actors}


def sum_counts(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Counters of several ranks added up key by key: numbers summed, maps merged the same
    way (a key one rank lacks counts as 0)."""
    out: dict[str, Any] = {}
    for item in items:
        for key, value in item.items():
            if isinstance(value, dict):
                out[key] = sum_counts([out.get(key, {}), value])
            else:
                out[key] = out.get(key, 0) + value
    return out


def waste_ratio(produced: int, accepted: int) -> float:
    """Valid batches received but not trained on, over valid batches received."""
    return (produced - accepted) / produced if produced else 0.0
