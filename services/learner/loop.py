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

import redis
import torch

from ppomq.metrics import LearnerMetrics
from ppomq.policy import numpy_state
from ppomq.proto import RolloutBatch, pack_weights
from ppomq.rundir import RunRecorder
from ppomq.settings import LearnerSettings
from ppomq.signals import WarmStop
from ppomq.weightserver.keys import RunKeys
from ppomq.weightserver.store import WeightStore

from .staleness import StalenessGate
from .trainer import PPOTrainer

log = logging.getLogger("ppomq.learner")

CKPT_NAME = "checkpoints/ckpt.pt"


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
        counters: dict[str, Any] | None = None,
        metrics: LearnerMetrics | None = None,
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
        self.batch_samples = settings.batch_samples or (
            settings.actors * settings.num_steps * settings.num_envs
        )
        c = counters or {}
        self.env_steps = int(c.get("env_steps", 0))
        self.trained_samples = int(c.get("trained_samples", 0))
        self.wall_offset = float(c.get("wall_s", 0.0))
        self.start = time.monotonic()
        self.start_unix = time.time()  # the same instant on the Unix clock, for benchmarks
        self.actors: dict[str, dict[str, Any]] = {}
        self.decode_rejects: dict[str, int] = {}
        self.produced_batches = 0
        self.phase_totals: Counter[str] = Counter()
        self.last_stats: dict[str, float] = {}
        # Unregistered metrics unless the service passes exported ones (tests build many loops).
        self.metrics = metrics or LearnerMetrics(registry=None)

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.monotonic() - self.start

    def publish(self, stop: WarmStop | None = None) -> float:
        """Publish the current version; returns the seconds it took.

        While Redis is unreachable it retries (1 s, doubling to 10 s) rather than losing the
        trained state to a traceback: actors keep acting on the version they hold and the
        weightserver keeps serving it. Asked to stop meanwhile, it gives up on this version
        (the checkpoint written on the way out still has it) and says so in one line."""
        t0 = time.perf_counter()
        header, blob = pack_weights(
            self.version,
            numpy_state(self.trainer.policy),
            model=self.trainer.policy.spec,
            learner_step=self.trainer.updates,
            env_steps=self.env_steps,
            extra={"env_id": self.s.env_id, "run_id": self.s.run_id},
        )
        delay = 1.0
        while True:
            try:
                self.store.publish(header, blob)
                break
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if stop is not None and stop.requested:
                    log.error("version %d not published, Redis unreachable (%s); the run "
                              "dir's checkpoint has it", self.version, exc)  # fmt: skip
                    break
                log.warning("Redis unreachable (%s); retrying the publish of version %d in "
                            "%.0f s", exc, self.version, delay)  # fmt: skip
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
        return time.perf_counter() - t0

    def _note_batch(self, batch: RolloutBatch) -> None:
        """Every valid batch counts as produced work and its episodes are real episodes."""
        steps = batch.num_steps * batch.num_envs
        self.env_steps += steps
        self.produced_batches += 1
        self.recorder.add_episodes(
            batch.episodes.returns,
            batch.episodes.lengths,
            env_steps=self.env_steps,
            wall_s=self.wall_s,
        )
        a = self.actors.setdefault(batch.actor_id, {"batches": 0, "env_steps": 0})
        a.update(
            last_seen=time.time(),
            policy_version=batch.policy_version,
            age=self.version - batch.policy_version,
            batches=a["batches"] + 1,
            env_steps=a["env_steps"] + steps,
        )

    def collect(self, stop: WarmStop) -> list[RolloutBatch]:
        """Admitted batches for one update: `batch_samples` of them (async), or one per
        actor at the current version (sync)."""
        out: list[RolloutBatch] = []
        samples = 0
        while not stop.requested and not self.done():
            try:
                batch = self.batches.get(timeout=0.1)
            except queue.Empty:
                continue
            self._note_batch(batch)
            if not self.gate.admit(self.version, batch.policy_version):
                continue
            out.append(batch)
            samples += batch.num_steps * batch.num_envs
            if self.s.mode == "sync":
                if len(out) >= self.s.actors:
                    break
            elif samples >= self.batch_samples:
                break
        if self.s.mode == "sync" and len(out) < self.s.actors:
            return []  # stopping mid-set: a partial set would not be synchronous PPO
        return out

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
        }
        self.last_stats = row
        self.recorder.add_update(row, env_steps=self.env_steps)
        self.metrics.record_update(
            version=self.version,
            env_steps=self.env_steps,
            accepted=self.gate.accepted,
            rejects=self.rejects(),
            phase_s=self.phase_totals,
            sps=row["charts/SPS"],
            mean_return=self.recorder.mean_return,
        )
        self.write_status()
        if self.version % self.s.checkpoint_every == 0:
            self.checkpoint()
        return True

    def rejects(self) -> dict[str, int]:
        out = Counter(self.decode_rejects)
        out.update(self.gate.rejected)
        return dict(out)

    def write_status(self) -> None:
        """What `ppomq status` shows; best effort (training never waits on it)."""
        status = {
            "version": self.version,
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "sps": self.env_steps / max(self.wall_s, 1e-9),
            "mean_return_20": self.recorder.mean_return,
            "episodes": self.recorder.episodes,
            "batches_accepted": self.gate.accepted,
            "rejects": self.rejects(),
            "mode": self.s.mode,
            "max_staleness": self.s.max_staleness,
            "updated_at": time.time(),
        }
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(self.keys.stats, json.dumps(status))
            if self.actors:
                pipe.hset(
                    self.keys.actors, mapping={k: json.dumps(v) for k, v in self.actors.items()}
                )
            pipe.execute()
        except Exception as exc:  # Redis blips must not stop training
            log.warning("could not write status to Redis: %s", exc)

    def checkpoint(self) -> Path:
        path = Path(self.s.run_dir) / CKPT_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "trainer": self.trainer.get_state(),
            "version": self.version,
            "counters": {
                "env_steps": self.env_steps,
                "trained_samples": self.trained_samples,
                "wall_s": self.wall_s,
            },
            "run_id": self.s.run_id,
            "env_id": self.s.env_id,
        }
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(path)  # atomic: a crash mid-write leaves the previous checkpoint
        return path


def load_checkpoint(run_dir: str) -> dict[str, Any] | None:
    path = Path(run_dir) / CKPT_NAME
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
