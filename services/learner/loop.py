"""LearnerLoop: the learner's state between updates and one collect-train-publish cycle.

No sockets here: batches come from a queue (the receiving thread fills it) and weights go
to a WeightStore, so tests can drive the loop directly.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from collections import Counter
from pathlib import Path
from typing import Any

from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ppomq.core.metrics import LearnerMetrics
from ppomq.core.rundir import RunRecorder
from ppomq.core.settings import LearnerSettings
from ppomq.core.signals import WarmStop
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import WeightStore
from ppomq.learner.checkpoint import CKPT_NAME, weights_digest, write_checkpoint
from ppomq.learner.episodes import EpisodeBook
from ppomq.learner.ledger import RolloutLedger
from ppomq.learner.roster import ActorRoster
from ppomq.learner.staleness import StalenessGate
from ppomq.learner.trainer import PPOTrainer
from ppomq.proto import DecodeError, Reason, RolloutBatch, SeqTracker, pack_weights

log = logging.getLogger("ppomq.learner")

# While no update comes (no admissible batch), counts still reach Redis and /metrics this
# often: rejects must be visible while the learner is stalled.
COUNTS_EVERY_S = 1.0
# Publish retries while Redis is away: short waits, so training resumes within about a
# second of Redis coming back, and a stop signal is never held up for long.
PUBLISH_BACKOFF = ExponentialBackoff(cap=1.0, base=0.05)


def actor_config(settings: Any) -> dict[str, Any]:
    """What actors apply outside the network, published in every weights header: how many
    batches they may send per version (the learner owns the update, so it owns how far
    actors run ahead), and CleanRL's reward scaling (running std of the discounted return,
    clipped) when --norm-reward."""
    flow = 1 if settings.mode == "sync" else int(settings.batches_per_version)
    out: dict[str, Any] = {"batches_per_version": flow}
    if settings.norm_reward:
        out["reward_norm"] = {"gamma": float(settings.gamma), "clip": 10.0, "epsilon": 1e-8}
    return out


class _StopPublishing(Exception):
    """Asked to stop while Redis is unreachable: give up on this version."""


class LearnerLoop:
    """The learner's state between updates; `step()` runs one collect-train-publish cycle."""

    def __init__(
        self,
        *,
        settings: LearnerSettings,
        trainer: PPOTrainer,
        store: WeightStore,
        redis: Any,
        batches: queue.Queue[RolloutBatch],
        recorder: RunRecorder,
        version: int,
        metrics: LearnerMetrics | None = None,
        seqs: SeqTracker | None = None,
        book: EpisodeBook | None = None,
    ) -> None:
        self.s = settings
        self.trainer = trainer
        self.store = store
        self.redis = redis
        self.keys = RunKeys(settings.run_id)
        self.batches = batches
        self.recorder = recorder
        self.version = version
        self.gate = StalenessGate(settings.max_staleness)
        # Async: samples per update, fixed for the run whatever number of actors is live,
        # so scaling actors changes throughput, never the algorithm.
        self.update_samples = settings.batch_samples or (
            settings.actors * settings.num_envs * settings.num_steps
        )
        # What each actor may send per version (published to them: actor_config); 0: any.
        self.flow = 1 if settings.mode == "sync" else settings.batches_per_version
        self.roster = ActorRoster(timeout_s=settings.actor_timeout_s, hint=settings.actors)
        # Each actor's last accepted `seq`: the receiving thread checks against it at the
        # door, this loop checks again and records it when it accepts a batch.
        self.seqs = seqs if seqs is not None else SeqTracker()
        # Each actor's episodes followed from its batches' own data (episodes.py); the
        # receiving thread feeds it, the same object, at the door.
        self.book = book if book is not None else EpisodeBook(settings.max_actors)
        # Episodes that ended in accepted batches whose start was not seen: not counted.
        self.episodes_unverified = 0
        # Env steps of accepted batches: the run's progress (--total-steps, lr annealing,
        # SPS, episodes). Batches refused here (stale, future version, seq) are discarded.
        self.env_steps = 0
        self.discarded_env_steps = 0
        self.trained_samples = 0
        self.wall_offset = 0.0
        self.start = time.monotonic()
        self.start_unix = time.time()  # the same instant on the Unix clock, for benchmarks
        # Per-actor state (this dict, the ledger's rows, the roster, the seqs) is bounded:
        # the ledger decides which actors are kept (--max-actors, --forget-actor-after-s).
        self.actors: dict[str, dict[str, Any]] = {}
        self.ledger = RolloutLedger(
            max_actors=settings.max_actors, forget_after_s=settings.forget_actor_after_s
        )
        # The receiving thread (snapshot(), drain_attributed()), when the service has one.
        self.receiver: Any = None
        self._door_stale_seen = (0, 0)
        self._door_surplus_seen = (0, 0)
        self._door_unattributed_seen: dict[str, int] = {}
        self._last_counts = 0.0
        # The status's `updated_at`: the last update (the learner's liveness probe reads it),
        # not the last write: counts are written every second, updates or not.
        self.updated_at = time.time()
        self._status_warned = 0.0
        # What write_status last wrote per actor row (its change marks), and when it last
        # rewrote the whole hash.
        self._status_rows_written: dict[str, tuple[Any, Any]] = {}
        self._status_full_at = float("-inf")
        # The receiving thread's counts of this incarnation, plus those of earlier ones.
        self.decode_rejects: dict[str, int] = {}
        self.decode_rejects_before: Counter[str] = Counter()
        self.produced_batches = 0  # valid batches received, accepted or not
        self.phase_totals: Counter[str] = Counter()
        self.last_stats: dict[str, float] = {}
        self.restarts = 0
        self.finished = False  # set once the run has ended normally (service.mark_finished)
        self._last_checkpoint = time.monotonic()
        self._published: tuple[int, str] = (-1, "")  # (version, its weights' sha256)
        # Unregistered metrics unless the service passes exported ones (tests build many loops).
        self.metrics = metrics or LearnerMetrics(registry=None)

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.monotonic() - self.start

    def publish(self, stop: WarmStop | None = None) -> float:
        """Publish the current version; returns the seconds it took.

        While Redis is unreachable it retries (redis-py's Retry, backoff capped at 1 s)
        rather than losing the trained state to a traceback: actors keep acting on the
        version they hold and the weightserver keeps serving it. A retry of a publish that
        had committed is recognised by the store. Asked to stop meanwhile, it gives up on
        this version (the checkpoint written on the way out still has it) in one line."""
        t0 = time.perf_counter()
        header, blob = pack_weights(
            self.version,
            self.trainer.host_state(),  # the weights' one trip to the host per version
            model=self.trainer.policy.spec,
            learner_step=self.trainer.updates,
            env_steps=self.env_steps,
            extra={"env_id": self.s.env_id, "run_id": self.s.run_id},
            actor=actor_config(self.s),
        )

        def failed(exc: Exception, failures: int) -> None:
            if stop is not None and stop.requested:
                raise _StopPublishing(str(exc))
            if failures == 1 or failures % 20 == 0:
                log.warning("Redis unreachable (%s); retrying the publish of version %d",
                            exc, self.version)  # fmt: skip

        retry = Retry(PUBLISH_BACKOFF, retries=-1)
        try:
            retry.call_with_retry(
                lambda: self.store.publish(header, blob), failed, with_failure_count=True
            )
            self._published = (self.version, header.sha256)
        except _StopPublishing as exc:
            log.error("version %d not published, Redis unreachable (%s); the run dir's "
                      "checkpoint has it", self.version, exc)  # fmt: skip
        return time.perf_counter() - t0

    def _admit(self, batch: RolloutBatch) -> bool:
        """Whether `batch` is trained on. Counts it as received, and only once accepted
        does anything it says count: env steps, episodes, its actor's `seq`, its liveness
        (but see _heard_if_known)."""
        steps = batch.num_steps * batch.num_envs
        self.produced_batches += 1
        admitted = self._gate(batch)
        outcome = "accepted" if admitted else self._refusal
        self._forget(self.ledger.note(batch.actor_id, outcome, sent=batch.sent, seq=batch.seq))
        a = self.actors.setdefault(batch.actor_id, {"batches": 0, "env_steps": 0})
        a.update(
            last_seen=time.time(),
            policy_version=batch.policy_version,
            age=self.version - batch.policy_version,
            batches=a["batches"] + 1,
        )
        if not admitted:
            self.discarded_env_steps += steps
            a["discarded_env_steps"] = a.get("discarded_env_steps", 0) + steps
            self._heard_if_known(batch.actor_id, outcome, batch.policy_version)
            return False
        self.seqs.record(batch.actor_id, batch.seq)
        self.roster.heard(batch.actor_id)
        self.env_steps += steps
        # The episodes the batch's own data makes (episodes.py), never its claims.
        assert batch.verified is not None  # set by the door or by _gate
        self.recorder.add_episodes(
            batch.verified.returns,
            batch.verified.lengths,
            env_steps=self.env_steps,
            wall_s=self.wall_s,
        )
        self.episodes_unverified += batch.unverified
        a["accepted"] = a.get("accepted", 0) + 1
        a["env_steps"] += steps
        return True

    def _heard_if_known(self, actor_id: str, outcome: str, policy_version: int | None) -> None:
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
            policy_version is not None
            and self.version - policy_version <= self.gate.max_staleness + 1
        )
        if trained:
            self.roster.heard(actor_id)
        elif just_missed:
            self.roster.joining(actor_id)

    def _gate(self, batch: RolloutBatch) -> bool:
        """The episode check (for a batch that did not come through the receiving thread's
        door), the seq check and the staleness gate; a refusal's ledger outcome in
        _refusal."""
        if batch.verified is None:
            try:
                self.book.verify(batch)
            except DecodeError as exc:
                self.gate.rejected[exc.reason.label] += 1
                self._refusal = exc.reason.label
                return False
        try:
            # Again here, not only at the door: two queued batches of one actor.
            self.seqs.check(batch.actor_id, batch.seq)
        except DecodeError:
            self.gate.rejected[Reason.SEQ_NOT_INCREASING.label] += 1
            self._refusal = "duplicate"
            return False
        self._refusal = "stale" if batch.policy_version <= self.version else "future_version"
        return self.gate.admit(self.version, batch.policy_version)

    def _forget(self, actor_ids: list[str]) -> None:
        """Drop every per-actor state of actors the ledger no longer keeps."""
        for actor_id in actor_ids:
            self.actors.pop(actor_id, None)
            self.roster.drop(actor_id)
            self.seqs.forget(actor_id)
            self.book.forget(actor_id)

    def poll_receiver(self) -> None:
        """The receiving thread's reject counts, and its refused messages that named their
        sender into the ledger (a door `seq_not_increasing` is a duplicate there)."""
        if self.receiver is None:
            return
        # One version of slack: a batch that only just missed an update reaches the gate
        # here, where it can make a newly joined actor live (_heard_if_known).
        self.receiver.stale_below = self.version - self.gate.max_staleness - 1
        self.receiver.future_above = self.version
        # Stale batches the door refused: received (valid) and discarded, as if here.
        batches, steps = self.receiver.stale_refused()
        seen_batches, seen_steps = self._door_stale_seen
        self.produced_batches += batches - seen_batches
        self.discarded_env_steps += steps - seen_steps
        self._door_stale_seen = (batches, steps)
        # Valid batches the door dropped from a full queue for newer ones: discarded too.
        batches, steps = self.receiver.surplus_dropped()
        seen_batches, seen_steps = self._door_surplus_seen
        self.produced_batches += batches - seen_batches
        self.discarded_env_steps += steps - seen_steps
        self._door_surplus_seen = (batches, steps)
        _, self.decode_rejects = self.receiver.snapshot()
        # Refusals under no actor: into the ledger's totals, as they come (its checkpoint
        # keeps them across restarts; the thread's own counts start at 0 with it).
        for reason, count in self.receiver.unattributed().items():
            new = count - self._door_unattributed_seen.get(reason, 0)
            if new:
                self.ledger.note_unattributed(reason, new)
                self._door_unattributed_seen[reason] = count
        for actor_id, reason, sent, seq in self.receiver.drain_attributed():
            outcome = "duplicate" if reason == Reason.SEQ_NOT_INCREASING.label else reason
            self._forget(self.ledger.note(actor_id, outcome, sent=sent, seq=seq))
            self._heard_if_known(actor_id, outcome, None)

    def publish_counts(self, *, force: bool = False) -> None:
        """At most every COUNTS_EVERY_S (or now, `force`): forget quiet actors, and put the
        counts (rejects, ledger) on /metrics and in Redis's status, updates or not."""
        now = time.monotonic()
        if not force and now - self._last_counts < COUNTS_EVERY_S:
            return
        self._last_counts = now
        self.poll_receiver()
        self._forget(self.ledger.prune())
        self.metrics.record_counts(
            accepted=self.gate.accepted,
            rejects=self.rejects(),
            discarded_env_steps=self.discarded_env_steps,
            ledger=self.ledger.totals_view(),
        )
        self.write_status()

    def collect(self, stop: WarmStop) -> list[RolloutBatch]:
        """Admitted batches for one update.

        Elastic: it waits for the actors it has heard from lately (ActorRoster), not for a
        configured number. Async: whole batches until `update_samples`, whatever number of
        actors is live; or fewer, once every live actor has sent all it may for this
        version (`batches_per_version`): more will not come before the next one. Sync: one
        fresh batch from every live actor (the quorum). Either way, once no admissible
        batch has arrived for `actor_timeout_s`, it trains on what it holds: nothing waits
        forever for an actor that is gone."""
        out: list[RolloutBatch] = []
        contributors: set[str] = set()
        at_version: Counter[str] = Counter()  # batches of this version, per actor
        samples = 0
        timeout = self.s.actor_timeout_s
        last_arrival = waiting_since = time.monotonic()
        said_waiting = False
        while not stop.requested and not self.done():
            arrived: list[RolloutBatch] = []
            try:
                arrived.append(self.batches.get(timeout=0.05))
                if self.s.mode == "sync":
                    # A quorum is whoever has sent: take every batch already here, so a
                    # new actor's batch is not left for a version it would be stale for.
                    while True:
                        arrived.append(self.batches.get_nowait())
            except queue.Empty:
                pass
            self.poll_receiver()
            self.publish_counts()
            now = time.monotonic()
            for batch in arrived:
                if self._admit(batch):
                    out.append(batch)
                    contributors.add(batch.actor_id)
                    if batch.policy_version == self.version:
                        at_version[batch.actor_id] += 1
                    samples += batch.num_steps * batch.num_envs
                    last_arrival = now
            if out and self._enough(contributors, at_version, samples):
                break
            if out and now - last_arrival > timeout:
                log.info("no new batch for %.1f s: training version %d on the %d batch(es) "
                         "it has", timeout, self.version, len(out))  # fmt: skip
                break
            if not out and not said_waiting and now - waiting_since > max(timeout, 10.0):
                said_waiting = True
                log.warning("no rollouts for %.0f s; waiting for actors to send to %s",
                            now - waiting_since, self.s.rollout_bind)  # fmt: skip
        stopping = stop.requested or self.done()
        if stopping and self.s.mode == "sync" and not self.roster.quorum(contributors):
            return []  # stopping mid-set: a partial set would not be synchronous PPO
        return out

    def _enough(self, contributors: set[str], at_version: Counter[str], samples: int) -> bool:
        if self.s.mode == "sync":
            return self.roster.quorum(contributors)
        if samples >= self.update_samples:
            return True
        if not self.flow:
            return False  # actors run ahead: more is on its way
        spent = {a for a, n in at_version.items() if n >= self.flow}
        return self.roster.quorum(spent)

    def done(self) -> bool:
        s = self.s
        if s.total_steps and self.env_steps >= s.total_steps:
            return True
        if s.duration_s and self.wall_s >= s.duration_s:
            return True
        mean = self.recorder.mean_return
        return (
            s.target_return is not None
            and len(self.recorder.window) == self.recorder.window.maxlen
            and mean is not None
            and mean >= s.target_return
        )

    def step(self, stop: WarmStop) -> bool:
        """One update; False when there was nothing to train on (stopping)."""
        t0 = time.perf_counter()
        batches = self.collect(stop)
        t_wait = time.perf_counter() - t0
        if not batches:
            return False
        stats = self.trainer.update(batches, self.env_steps)
        self.trained_samples += int(stats["charts/samples"])
        self.version += 1
        if self.receiver is not None:  # before any actor can hold this version's weights
            self.receiver.future_above = self.version
        t_publish = self.publish(stop)
        for name, value in (
            ("wait", t_wait),
            ("targets", stats["time/learner_targets"]),
            ("sgd", stats["time/learner_sgd"]),
            ("publish", t_publish),
        ):
            self.phase_totals[name] += value
        wall = self.wall_s
        row = {
            "version": self.version,
            "env_steps": self.env_steps,
            "wall_s": round(wall, 3),
            "charts/SPS": self.env_steps / max(wall, 1e-9),
            "charts/mean_return_20": self.recorder.mean_return,
            "charts/batches_accepted": self.gate.accepted,
            "charts/batches_rejected": sum(self.gate.rejected.values())
            + sum(self.decode_rejects.values()),
            "time/learner_wait": t_wait,
            "time/learner_publish": t_publish,
            **stats,
            "charts/discarded_env_steps": self.discarded_env_steps,  # last: older CSVs
        }
        self.last_stats = row
        self.recorder.add_update(row, env_steps=self.env_steps)
        self.metrics.record_update(
            version=self.version,
            env_steps=self.env_steps,
            discarded_env_steps=self.discarded_env_steps,
            accepted=self.gate.accepted,
            rejects=self.rejects(),
            phase_s=self.phase_totals,
            sps=row["charts/SPS"],
            mean_return=self.recorder.mean_return,
        )
        self.updated_at = time.time()
        self.publish_counts(force=True)
        if time.monotonic() - self._last_checkpoint >= self.s.checkpoint_interval_s:
            self.checkpoint()
        return True

    def rejects(self) -> dict[str, int]:
        out = Counter(self.decode_rejects)
        out.update(self.decode_rejects_before)
        out.update(self.gate.rejected)
        return dict(out)

    def write_status(self) -> None:
        """What `ppomq status` shows; best effort (training never waits on it)."""
        status = {
            "version": self.version,
            "env_steps": self.env_steps,
            "discarded_env_steps": self.discarded_env_steps,
            "wall_s": self.wall_s,
            "sps": self.env_steps / max(self.wall_s, 1e-9),
            "mean_return_20": self.recorder.mean_return,
            "episodes": self.recorder.episodes,
            "episodes_unverified": self.episodes_unverified,
            "batches_accepted": self.gate.accepted,
            "rejects": self.rejects(),
            "mode": self.s.mode,
            "max_staleness": self.s.max_staleness,
            "live_actors": len(self.roster.live()),
            # Totals of every actor ever seen; per actor in the `actors` hash (bounded).
            "ledger": self.ledger.totals_view(),
            "max_actors": self.s.max_actors,
            "forget_actor_after_s": self.s.forget_actor_after_s,
            "learner_restarts": self.restarts,
            "updated_at": self.updated_at,  # the last update (or the start)
            "counts_at": time.time(),  # rejects and the ledger: at most a second old
        }
        try:
            # One transaction: `ppomq status` never reads the actors between DEL and HSET.
            pipe = self.redis.pipeline(transaction=True)
            pipe.set(self.keys.stats, json.dumps(status))
            # The kept actors only (bounded: forgotten and dropped ones leave the hash),
            # each with its ledger row. Up to --max-actors rows (made-up ids fill them),
            # and a write follows every update: serialising them all took ~10 ms a write,
            # so a row is written again only when its actor's `batches` or its ledger
            # row's `received` moved (what every batch and every ledger note changes),
            # and the whole hash every 10 s (a Redis that lost it gets it back).
            rows = self.ledger.actors
            now = time.monotonic()
            written = self._status_rows_written
            full = not written or now - self._status_full_at >= 10.0
            marks: dict[str, tuple[Any, Any]] = {}
            changed: dict[str, str] = {}
            for k, v in self.actors.items():
                row = rows.get(k)
                marks[k] = (v["batches"], None if row is None else row["received"])
                if full or written.get(k) != marks[k]:
                    changed[k] = json.dumps(v if row is None else dict(v, ledger=row))
            # Actors whose every batch the door refused (stale, future version, surplus):
            # no batch of theirs reached this loop, but their ledger row is worth showing.
            for k, row in rows.items():
                if k in marks:
                    continue
                marks[k] = (None, row["received"])
                if full or written.get(k) != marks[k]:
                    changed[k] = json.dumps({
                        "last_seen": row["last_seen"], "policy_version": None,
                        "batches": row["received"], "env_steps": 0, "ledger": row,
                    })  # fmt: skip
            gone = [k for k in written if k not in marks]
            if full:
                pipe.delete(self.keys.actors)
            elif gone:
                pipe.hdel(self.keys.actors, *gone)
            if changed:
                pipe.hset(self.keys.actors, mapping=changed)
            pipe.execute()
            self._status_rows_written = marks
            if full:
                self._status_full_at = now
        except Exception as exc:  # Redis blips must not stop training
            self._status_rows_written = {}  # the next write is a whole one
            if time.monotonic() - self._status_warned > 10.0:  # written every second
                self._status_warned = time.monotonic()
                log.warning("could not write status to Redis: %s", exc)

    def checkpoint(self) -> Path:
        """Everything a restarted learner needs to go on as if it had not stopped: the
        trainer, the version, and every counter and histogram the summary reports."""
        path = Path(self.s.run_dir) / CKPT_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        rec = self.recorder
        state = {
            "trainer": self.trainer.get_state(),
            "version": self.version,
            "counters": {
                "env_steps": self.env_steps,
                "discarded_env_steps": self.discarded_env_steps,
                "trained_samples": self.trained_samples,
                "wall_s": self.wall_s,
                "produced_batches": self.produced_batches,
                "episodes_unverified": self.episodes_unverified,
                "restarts": self.restarts,
                "phase_totals": dict(self.phase_totals),
                "decode_rejects": dict(Counter(self.decode_rejects) + self.decode_rejects_before),
                "gate": self.gate.get_state(),
                "actors": self.actors,
                "ledger": self.ledger.get_state(),
                "recorder": rec.get_state(),
            },
            "run_id": self.s.run_id,
            "env_id": self.s.env_id,
            "finished": self.finished,
        }
        # The digest of the weights as published (a resume compares it with Redis's): the
        # publish's own when this version's weights were published, else packed again.
        version, digest = self._published
        if version != self.version:
            digest = weights_digest(self.trainer.host_state())
        write_checkpoint(path, state, weights_sha256=digest)
        self._last_checkpoint = time.monotonic()
        return path

    def restore(self, ckpt: dict[str, Any]) -> None:
        """Counters, histograms and trainer state of a checkpoint; one more restart."""
        self.trainer.set_state(ckpt["trainer"])
        c = ckpt["counters"]
        self.env_steps = int(c["env_steps"])
        self.trained_samples = int(c["trained_samples"])
        self.wall_offset = float(c["wall_s"])  # the learner's clock goes on from there
        self.start = time.monotonic()
        # Checkpoints written before these counters existed resume with zeros.
        self.produced_batches = int(c.get("produced_batches", 0))
        self.discarded_env_steps = int(c.get("discarded_env_steps", 0))
        self.episodes_unverified = int(c.get("episodes_unverified", 0))
        self.restarts = int(c.get("restarts", 0)) + 1
        self.phase_totals = Counter(c.get("phase_totals", {}))
        self.decode_rejects_before = Counter(c.get("decode_rejects", {}))
        self.gate.set_state(c.get("gate", {}))
        actors = dict(c.get("actors", {}))
        if "ledger" in c:
            self.ledger.set_state(c["ledger"])
        else:  # a checkpoint from before the ledger: its actors, as far as they say
            recent = sorted(actors.items(), key=lambda kv: kv[1].get("last_seen", 0.0))
            self.ledger.set_state({"actors": [
                [k, {"received": int(v.get("batches", 0)), "accepted": int(v.get("accepted", 0)),
                     "last_seen": float(v.get("last_seen", 0.0))}] for k, v in recent
            ]})  # fmt: skip
        # Bounded: only the actors the ledger keeps (a checkpoint under a larger cap).
        self.actors = {k: v for k, v in actors.items() if k in self.ledger.actors}
        self.recorder.set_state(c.get("recorder", {}), env_steps=self.env_steps)
