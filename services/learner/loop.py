"""The learner's run loop: collect admitted batches, train one update, publish, record.

Built from parts, each with one job and testable alone:
- Admission (admission.py): which batches are trained on; every per-actor state.
- PPOTrainer (trainer.py): batches -> one update. Its gradient step writes one flat buffer
  that a learner group (group.py) all-reduces before the optimizer step.
- Publisher (publisher.py): versions into Redis, with retry; the finished marker.
- RunState (run_state.py): the run's counters, clock and records; its end.
- StatusWriter (status.py): what `ppomq status` reads.
No sockets here: batches come from a queue (the receiving thread fills it), so tests drive
the loop directly.

In a learner group every rank runs this loop on its own actors' batches. Before each
update the ranks exchange what they accepted (env steps, episodes, counters) and whether
the run ends; then they update together. Rank 0 alone publishes, records, writes the
status and checkpoints, for the group.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ppomq.core.metrics import LearnerMetrics
from ppomq.core.rundir import RunRecorder
from ppomq.core.settings import LearnerSettings
from ppomq.core.signals import WarmStop
from ppomq.core.store.weight_store import WeightStore
from ppomq.learner.admission import Admission, sum_counts
from ppomq.learner.checkpoint import CKPT_NAME, weights_digest, write_checkpoint
from ppomq.learner.door import Door
from ppomq.learner.episodes import EpisodeBook
from ppomq.learner.grants import (
    GrantBook,
    Grants,
    batches_needed,
    fixed_grants,
    per_actor_grants,
)
from ppomq.learner.group import LearnerGroup, straggler_quorum
from ppomq.learner.publisher import Publisher, batches_per_version
from ppomq.learner.roster import ReceivingClock
from ppomq.learner.run_state import RunState
from ppomq.learner.status import StatusWriter
from ppomq.learner.trainer import PPOTrainer
from ppomq.proto import RolloutBatch, SeqTracker

log = logging.getLogger("ppomq.learner")

# How long an update waits for more batches about to expire (_expiring) once none come.
EXPIRING_QUIET_S = 0.05

# While no update comes (no admissible batch), counts still reach Redis and /metrics this
# often: rejects must be visible while the learner is stalled.
COUNTS_EVERY_S = 1.0


class LearnerLoop:
    """One collect-train-publish cycle per `step()`, over the parts it is given."""

    def __init__(
        self,
        *,
        settings: LearnerSettings,
        trainer: PPOTrainer,
        batches: queue.Queue[RolloutBatch],
        run: RunState,
        admission: Admission,
        publisher: Publisher | None,
        status: StatusWriter | None,
        metrics: LearnerMetrics,
        receiving: ReceivingClock | None = None,
        group: LearnerGroup | None = None,
        grants: GrantBook | None = None,
    ) -> None:
        self.s = settings
        self.trainer = trainer
        self.batches = batches
        self.run = run
        self.admission = admission
        self.publisher = publisher
        self.status = status
        self.metrics = metrics
        self.group = group
        # Rank 0 of a group, or a learner alone: it publishes, records and checkpoints.
        self.lead = group is None or group.lead
        # The other ranks' counters as of the last update (rank 0 adds them up), and once
        # the run is over every rank's per-actor rows (the summary's).
        self.others: list[dict[str, Any]] = []
        self.group_actors: dict[str, Any] | None = None
        self.group_ledger: dict[str, Any] | None = None
        # The other ranks' admission state (ledger, gate, per-actor rows) as of the last
        # checkpoint: rank 0's checkpoint carries it, and a restarted group hands each
        # rank its own back, so the ledger adds up across restarts too.
        self.member_states: list[dict[str, Any]] = []
        # The roster's clock: stopped while this loop trains and publishes (step).
        self.receiving = receiving or ReceivingClock()
        # The update-size rule (grants.py): async --batch-samples N, N samples per update
        # whatever number of actors is live; else (0, and sync) one share from every live
        # actor, so that whatever the replica count each batch sampled is trained on.
        self.update_samples: int | None = None
        if settings.mode == "async" and settings.batch_samples:
            self.update_samples = settings.batch_samples
            if group is not None:  # the same total batch, shared by the ranks
                self.update_samples = math.ceil(self.update_samples / group.world_size)
        # What each actor may send per version (published to them: actor_config); 0: any.
        self.flow = batches_per_version(settings)
        # Who may sample what with each version; the receiving thread holds batches to it.
        self.grants = grants
        # Fixed samples: with --batches-per-version k > 1 the batches of the next k - 1
        # updates are granted too (within --max-staleness), so actors sample while the
        # learner trains, those batches trained a version or more old; 1 is lock-step.
        self.updates_ahead = (
            max(0, min(settings.max_staleness, self.flow - 1)) if settings.mode == "async" else 0
        )
        self._batch_samples = settings.num_envs * settings.num_steps  # seen: last update's
        self._counts_at = float("-inf")
        self._share_states_after_update = False
        self.agreed_stop = False
        self._checkpoint_at = time.monotonic()

    def publish(self, stop: WarmStop | None = None) -> float:
        """Publish the current version (the weights' one trip to the host per version);
        returns the seconds it took."""
        assert self.publisher is not None
        grants = self.plan_grants()
        if grants is not None and self.grants is not None:
            self.grants.set(self.run.version, grants)  # before any actor can hold it
            log.debug("grants with version %d: %s", self.run.version, grants.header())
        return self.publisher.publish(
            self.run.version,
            self.trainer.host_state(),
            model=self.trainer.policy.spec,
            learner_step=self.trainer.updates,
            env_steps=self.run.env_steps,
            stop=stop,
            grants=grants,
        )

    def plan_grants(self) -> Grants | None:
        """What actors may sample with the version about to be published; None when they
        run ahead (--batches-per-version 0). Fixed samples: the batches the next updates
        need (grants.py), for a learner alone; a group's rank 0 knows only its own actors,
        so a group grants every actor its share, as the per-actor rule does."""
        if not self.flow:
            return None
        if self.update_samples is None or self.group is not None or self.grants is None:
            return per_actor_grants(self.flow)
        known, pending = self.grants.plan_inputs()
        need = batches_needed(self.update_samples, self._batch_samples)
        wanted = need * (1 + self.updates_ahead) - sum(pending.values()) - self.batches.qsize()
        return fixed_grants(known=known, pending=pending, wanted=wanted,
                            cap=need * (1 + self.updates_ahead))  # fmt: skip

    def take_door(self) -> None:
        # A rank other than 0 may see rank 0's next version before it has counted its
        # own update: one version of slack at its door (its gate checks again later).
        self.admission.take_door(self.run.version, ahead=0 if self.lead else 1)
        if self.grants is not None:
            self.grants.forget_below(self.run.version - self.s.max_staleness - 1)

    def publish_counts(self, *, force: bool = False) -> None:
        """At most every COUNTS_EVERY_S (or now, `force`): forget quiet actors, and put the
        counts (rejects, ledger) on /metrics and in Redis's status, updates or not."""
        now = time.monotonic()
        if not force and now - self._counts_at < COUNTS_EVERY_S:
            return
        self._counts_at = now
        admission = self.admission
        self.take_door()
        admission.forget(admission.ledger.prune())
        counts = self.counts()
        self.metrics.record_counts(
            accepted=counts["batches_accepted"],
            rejects=counts["rejects"],
            discarded_env_steps=counts["discarded_env_steps"],
            ledger=counts["ledger"],
        )
        self.write_status()

    def counts(self) -> dict[str, Any]:
        """Admission's counters: this learner's, or on rank 0 of a group the group's."""
        own = self.admission.counts()
        return sum_counts([own, *self.others]) if self.lead and self.others else own

    def write_status(self) -> None:
        if self.status is not None:
            self.status.write(self.run, self.admission, self.counts())

    def collect(self, stop: WarmStop) -> list[RolloutBatch]:
        """Admitted batches for one update.

        Elastic: it waits for the actors it has heard from lately (ActorRoster), not for a
        configured number. Async, fixed samples: whole batches until `update_samples`,
        whatever number of actors is live; or fewer, once every live actor has sent all
        it was granted for this version: more will not come before the next one. Async,
        per actor: a batch from every live actor. Sync: one fresh batch from every live
        actor (the quorum). Either way, once no admissible batch has arrived
        for `actor_timeout_s`, it trains on what it holds: nothing waits forever for an
        actor that is gone; holding nothing, it takes a batch beyond its grant from each
        actor (GrantBook.open), which actors send when no version came for a while."""
        out: list[RolloutBatch] = []
        contributors: set[str] = set()
        at_version: Counter[str] = Counter()  # batches of this version, per actor
        samples = 0
        timeout = self.s.actor_timeout_s
        last_arrival = waiting_since = time.monotonic()
        said_waiting = opened = False
        # A group's rank leaves on its own end too, to say so to the others (_agree).
        while not stop.requested and not self.run.done() and not self.run.reached_end():
            if self.group is not None:
                self.group.check()  # a lost rank: GroupLostError, never a wait forever
            arrived = self._arrivals()
            self.take_door()
            self.publish_counts()
            now = time.monotonic()
            for batch in arrived:
                if not self.admission.admit(batch, self.run.version):
                    continue
                self.run.accept(batch)
                out.append(batch)
                contributors.add(batch.actor_id)
                if batch.policy_version == self.run.version:
                    at_version[batch.actor_id] += 1
                    if self.flow and at_version[batch.actor_id] >= self.flow:
                        self.admission.roster.waiting(batch.actor_id)
                samples += batch.num_steps * batch.num_envs
                last_arrival = now
            if out and self._enough(contributors, at_version, samples):
                out += self._queued() if self.update_samples is None else self._expiring()
                break
            if out and now - last_arrival > timeout:
                log.info("no new batch for %.1f s: training version %d on the %d batch(es) "
                         "it has", timeout, self.run.version, len(out))  # fmt: skip
                break
            if self.group is not None and self._group_goes(out, samples):
                break
            if not out and not opened and self.grants is not None and now - last_arrival > timeout:
                opened = True
                self.grants.open(self.run.version)
                log.info("no batch for %.1f s: taking one more batch with version %d from "
                         "any actor", timeout, self.run.version)  # fmt: skip
            if not out and not said_waiting and now - waiting_since > max(timeout, 10.0):
                said_waiting = True
                log.warning("no rollouts for %.0f s; waiting for actors to send to %s",
                            now - waiting_since, self.s.rollout_bind)  # fmt: skip
        if self.group is not None:
            self.group.mark_ready(self.run.version)
        stopping = stop.requested or self.run.done() or self.run.reached_end()
        if stopping and self.s.mode == "sync" and not self.admission.roster.quorum(contributors):
            return []  # stopping mid-set: a partial set would not be synchronous PPO
        return out

    def _size_queue(self, live: int) -> None:
        """With grants every batch past the door is one an update takes: the queue holds
        what the live actors may send with a version (at least --queue-batches), so none
        waits in the socket while it grows older. Without, it stays --queue-batches."""
        if self.grants is None or not self.flow or self.batches.maxsize <= 0:
            return  # an unbounded queue (tests) stays so
        ahead = 0
        if self.update_samples is not None:
            ahead = batches_needed(self.update_samples, self._batch_samples) * 2
        self.batches.maxsize = max(self.s.queue_batches, (live + 1) * self.flow + ahead)

    def _queued(self) -> list[RolloutBatch]:
        """Per actor: the batches already queued too. An actor may send several with one
        version (--batches-per-version); left for later updates they would pile up one
        version older each time, until too old to train."""
        return self._admitted(self._drain())

    def _admitted(self, batches: list[RolloutBatch]) -> list[RolloutBatch]:
        """Of `batches`, those admission takes, each counted by the run."""
        out = []
        for batch in batches:
            if self.admission.admit(batch, self.run.version):
                self.run.accept(batch)
                out.append(batch)
        return out

    def _drain(self) -> list[RolloutBatch]:
        drained = []
        with contextlib.suppress(queue.Empty):
            while True:
                drained.append(self.batches.get_nowait())
        return drained

    def _expiring(self) -> list[RolloutBatch]:
        """Fixed samples: queued batches as old as the staleness bound allows, which the
        next update could no longer take (the first batch of each actor that joined a
        version, beyond what that update needed): trained now, not thrown away."""
        take_where = getattr(self.batches, "take_where", None)
        if self.update_samples is None or take_where is None:
            return []
        oldest = self.run.version - self.s.max_staleness
        out: list[RolloutBatch] = []
        # The receiving thread waits for room in the queue with more of them decoded: take
        # until none has come for EXPIRING_QUIET_S.
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < EXPIRING_QUIET_S:
            taken = take_where(lambda b: b.policy_version <= oldest)
            if not taken:
                time.sleep(0.005)
                continue
            quiet_since = time.monotonic()
            out += self._admitted(taken)
        return out

    def _group_goes(self, out: list[RolloutBatch], samples: int) -> bool:
        """Whether this rank of a group stops collecting for the others: it has no live
        actor to wait for and another rank is ready (it takes part with nothing), or
        DD-PPO's straggler rule (--sync-frac of the ranks ready, --min-share held)."""
        assert self.group is not None
        ready = self.group.ready_count(self.run.version)
        if not out:
            return ready >= 1 and not self.admission.roster.live()
        return (
            self.s.sync_frac < 1
            and ready >= straggler_quorum(self.group.world_size, self.s.sync_frac)
            and samples >= self.s.min_share * self._update_target()
        )

    def _update_target(self) -> int:
        """Samples a full update holds: the fixed number, or a share from each live actor."""
        if self.update_samples is not None:
            return self.update_samples
        return max(1, len(self.admission.roster.live())) * max(1, self.flow) * self._batch_samples

    def _arrivals(self) -> list[RolloutBatch]:
        """What the queue holds now, waiting briefly for one batch."""
        arrived: list[RolloutBatch] = []
        try:
            arrived.append(self.batches.get(timeout=0.05))
            if self.s.mode == "sync":
                # A quorum is whoever has sent: take every batch already here, so a new
                # actor's batch is not left for a version it would be stale for.
                while True:
                    arrived.append(self.batches.get_nowait())
        except queue.Empty:
            pass
        return arrived

    def _enough(self, contributors: set[str], at_version: Counter[str], samples: int) -> bool:
        roster = self.admission.roster
        if self.s.mode == "sync":
            return roster.quorum(contributors)
        if self.grants is not None:  # an actor sending beyond its grant sets no pace
            contributors = contributors | self.grants.overdrawn()
        if self.update_samples is None:
            # Per actor: a batch from every live actor, of any version the gate admits; a
            # share over one lets an actor sample its next batch while the learner trains.
            return roster.quorum(contributors)
        if samples >= self.update_samples:
            return True
        if not self.flow:
            return False  # actors run ahead: more is on its way
        # Fixed: fewer, once nothing is queued and every live actor has sent what it was
        # granted with this version (or was granted nothing): more will not come before
        # the next one.
        if not self.batches.empty():
            return False
        spent = {a for a, n in at_version.items() if n >= self._grant_of(a)}
        return roster.quorum(spent | self._ungranted(roster.live()))

    def _grant_of(self, actor_id: str) -> int:
        """What `actor_id` may send with the current version."""
        if self.grants is None:
            return self.flow
        granted = self.grants.of(actor_id, self.run.version)
        return self.flow if granted is None else granted

    def _ungranted(self, actors: set[str]) -> set[str]:
        """Of `actors`, those that owe nothing for the current version."""
        return {a for a in actors if self._grant_of(a) == 0}

    def step(self, stop: WarmStop) -> bool:
        """One update; False when there was nothing to train on (stopping)."""
        t0 = time.perf_counter()
        batches = self.collect(stop)
        if self.group is not None:
            if not self._agree(bool(batches), stop):
                return False
        elif not batches:
            return False
        t_wait = time.perf_counter() - t0
        # Actors wait for this version meanwhile: the time from here to the next collect
        # is no silence of theirs (roster.py).
        with self.receiving.busy():
            self._train(batches, t_wait, stop)
        return True

    def _agree(self, holding: bool, stop: WarmStop) -> bool:
        """A group's ranks, before an update: every rank's share of env steps, episodes
        and counters, and whether the run ends (any rank's stop signal or end is every
        rank's). True when some rank holds batches: then every rank updates."""
        assert self.group is not None
        run = self.run
        mine = {
            "share": run.take_share(),
            "holding": holding,
            "done": run.reached_end(),
            "signum": stop.signum if stop.requested else None,
            "counts": self.admission.counts(),
            "checkpoint": self.lead and self._checkpoint_due(),
        }
        every = self.group.share(mine)
        # Rank 0 checkpoints after this update: every rank's admission state goes with it.
        self._share_states_after_update = bool(every[0]["checkpoint"])
        run.merge_shares([r["share"] for r in every])
        self.others = [r["counts"] for i, r in enumerate(every) if i != self.group.rank]
        signum = next((r["signum"] for r in every if r["signum"] is not None), None)
        if signum is not None:
            self.agreed_stop = True
            if not stop.requested:
                stop.requested, stop.signum = True, signum  # stopped with the rank signalled
        run.group_done = any(r["done"] for r in every)
        return any(r["holding"] for r in every)

    def ended(self, stop: WarmStop) -> bool:
        """Whether the training loop ends now: a stop signal or the run's end; in a group,
        as the ranks agreed before the last update (a rank leaving alone would leave the
        others waiting in a collective)."""
        if self.group is not None:
            return self.agreed_stop or self.run.done()
        return stop.requested or self.run.done()

    def _train(self, batches: list[RolloutBatch], t_wait: float, stop: WarmStop) -> None:
        """Train on `batches`, publish the new version, record it, checkpoint when due."""
        run = self.run
        stats = self.trainer.update(batches, run.env_steps)
        run.trained_samples += int(stats["charts/samples"])
        if batches:  # a group's rank may take part with none
            self._batch_samples = max(1, round(stats["charts/samples"] / len(batches)))
        run.version += 1
        self.take_door()  # before any actor can hold this version's weights
        if self.lead:
            t_publish = self.publish(stop)
        else:
            t_publish = 0.0
            if self.grants is not None and self.flow:
                # Rank 0 publishes the group's grants: a share for every actor (plan_grants).
                self.grants.set(run.version, per_actor_grants(self.flow))
        roster = self.admission.roster
        roster.new_version()
        live = roster.live()
        for actor_id in self._ungranted(live):
            roster.waiting(actor_id)  # it owes nothing for this version: not silent
        self._size_queue(len(live))
        for name, value in (
            ("wait", t_wait),
            ("targets", stats["time/learner_targets"]),
            ("sgd", stats["time/learner_sgd"]),
            ("allreduce", stats.get("time/learner_allreduce", 0.0)),
            ("publish", t_publish),
        ):
            if value or name != "allreduce":  # a learner alone has no collectives
                run.phase_totals[name] += value
        if self.lead:
            self._record(stats, t_wait, t_publish)
        run.updated_at = time.time()
        self.publish_counts(force=True)
        if self.group is not None:
            if self._share_states_after_update:
                self.share_states()
                if self.lead:
                    self.checkpoint()
        elif self._checkpoint_due():
            self.checkpoint()

    def _checkpoint_due(self) -> bool:
        return time.monotonic() - self._checkpoint_at >= self.s.checkpoint_interval_s

    def share_states(self) -> None:
        """Every rank of a group at once: each rank's admission state, which rank 0
        checkpoints and adds up (the status's and the summary's counters, per-actor rows
        included)."""
        assert self.group is not None
        admission = self.admission
        every = self.group.share({"counts": admission.counts(), "state": admission.get_state()})
        rank = self.group.rank
        self.others = [r["counts"] for i, r in enumerate(every) if i != rank]
        self.member_states = [r["state"] for r in every[1:]]
        states = [r["state"] for r in every]
        self.group_actors = {k: v for st in states for k, v in st["actors"].items()}
        self.group_ledger = {
            k: {kk: v for kk, v in row.items() if kk != "last_seen"}
            for st in states
            for k, row in st["ledger"]["actors"]
        }

    def _record(self, stats: dict[str, float], t_wait: float, t_publish: float) -> None:
        """One update's row in progress.csv and TensorBoard, and its figures on /metrics."""
        run, admission = self.run, self.admission
        assert run.recorder is not None
        counts = self.counts()
        row = {
            "version": run.version,
            "env_steps": run.env_steps,
            "wall_s": round(run.wall_s, 3),
            "charts/SPS": run.sps,
            "charts/mean_return_20": run.recorder.mean_return,
            "charts/batches_accepted": counts["batches_accepted"],
            # This incarnation's refusals (the door's and the gate's).
            "charts/batches_rejected": sum(admission.gate.rejected.values())
            + sum(admission.door_rejects.values()),
            "time/learner_wait": t_wait,
            "time/learner_publish": t_publish,
            **stats,
            "charts/discarded_env_steps": counts["discarded_env_steps"],  # last: older CSVs
        }
        run.last_stats = row
        run.recorder.add_update(row, env_steps=run.env_steps)
        self.metrics.record_update(
            version=run.version,
            env_steps=run.env_steps,
            discarded_env_steps=counts["discarded_env_steps"],
            accepted=counts["batches_accepted"],
            rejects=counts["rejects"],
            phase_s=run.phase_totals,
            sps=row["charts/SPS"],
            mean_return=run.recorder.mean_return,
        )

    def checkpoint(self) -> Path:
        """Everything a restarted learner needs to go on as if it had not stopped: the
        trainer, the version, and every counter and histogram the summary reports."""
        path = Path(self.s.run_dir) / CKPT_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "trainer": self.trainer.get_state(),
            "version": self.run.version,
            "counters": {**self.run.get_state(), **self.admission.get_state()},
            "run_id": self.s.run_id,
            "env_id": self.s.env_id,
            "finished": self.run.finished,
        }
        if self.group is not None:
            state["member_counters"] = self.member_states
        # The digest of the weights as published (a resume compares it with Redis's): the
        # publish's own when this version's weights were published, else packed again.
        assert self.publisher is not None, "rank 0 of a group checkpoints, no other"
        version, digest = self.publisher.published
        if version != self.run.version:
            digest = weights_digest(self.trainer.host_state())
        write_checkpoint(path, state, weights_sha256=digest)
        self._checkpoint_at = time.monotonic()
        return path

    def restore(self, ckpt: dict[str, Any]) -> None:
        """Counters, histograms and trainer state of a checkpoint; one more restart."""
        self.trainer.set_state(ckpt["trainer"])
        counters = ckpt["counters"]
        self.run.set_state(counters)
        self.admission.set_state(counters)
        self.member_states = list(ckpt.get("member_counters", []))


def build_loop(
    *,
    settings: LearnerSettings,
    trainer: PPOTrainer,
    store: WeightStore | None,
    batches: queue.Queue[RolloutBatch],
    recorder: RunRecorder | None,
    door: Door,
    seqs: SeqTracker,
    book: EpisodeBook,
    metrics: LearnerMetrics | None = None,
    clock: Callable[[], float] = time.monotonic,
    group: LearnerGroup | None = None,
    learners: list[str] | None = None,
) -> LearnerLoop:
    """A loop and its parts for `settings`; `door`, `seqs` and `book` are shared with the
    receiving thread. `metrics`: unregistered ones unless the service passes exported ones
    (tests build many loops). `clock`: the time the roster's receiving clock runs on
    (ReceivingClock: it stands still while the loop trains and publishes). A group's rank
    other than 0 has no `store` and no `recorder`: rank 0 publishes and records for it;
    `learners`: every rank's rollout endpoint, which rank 0 publishes to the actors."""
    s = settings
    receiving = ReceivingClock(clock)
    admission = Admission(
        max_staleness=s.max_staleness,
        actor_timeout_s=s.actor_timeout_s,
        actors_hint=s.actors,
        max_actors=s.max_actors,
        forget_actor_after_s=s.forget_actor_after_s,
        door=door,
        seqs=seqs,
        book=book,
        clock=receiving,
    )
    return LearnerLoop(
        settings=s,
        trainer=trainer,
        batches=batches,
        run=RunState(settings=s, recorder=recorder, grouped=group is not None),
        admission=admission,
        publisher=None if store is None else Publisher(store=store, settings=s, learners=learners),
        status=None
        if store is None
        else StatusWriter(
            redis=store.client, settings=s, learners=1 if group is None else group.world_size
        ),
        metrics=metrics or LearnerMetrics(registry=None),
        receiving=receiving,
        group=group,
        grants=GrantBook(timeout_s=s.actor_timeout_s, max_actors=s.max_actors, clock=receiving),
    )
