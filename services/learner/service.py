"""`ppomq learner`: the shell around PPOTrainer — receive, gate, train, publish, record.

Wiring, in order: settings -> logging -> Redis store -> policy (fresh or resumed) ->
publish the first version -> receiving thread -> the loop below. Stopping: the first
SIGTERM/SIGINT finishes the current update, checkpoints and exits 0; a second exits now.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ppomq.envs import rollout_spec_for
from ppomq.errors import UsageError
from ppomq.metrics import LearnerMetrics, start_metrics_server
from ppomq.policy import ActorCritic, model_spec_for, numpy_state
from ppomq.proto import RolloutBatch, pack_weights
from ppomq.redis_util import connect_redis
from ppomq.rundir import RunRecorder, plot_learning_curve
from ppomq.settings import LearnerSettings, settings_snapshot
from ppomq.signals import WarmStop
from ppomq.transport import RolloutReceiver
from ppomq.weightserver.keys import RunKeys
from ppomq.weightserver.store import WeightStore

from .receiver import BatchReceiver
from .staleness import StalenessGate
from .trainer import PPOConfig, PPOTrainer

log = logging.getLogger("ppomq.learner")

CKPT_NAME = "checkpoints/ckpt.pt"


def _check_port_free(endpoint: str) -> None:
    """A taken tcp port is a user error with a fix, not a ZMQError traceback."""
    if not endpoint.startswith("tcp://"):
        return
    host, _, port = endpoint[6:].rpartition(":")
    host = "0.0.0.0" if host in ("*", "") else host
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, int(port)))
        except OSError as exc:
            raise UsageError(
                f"cannot bind {endpoint} ({exc.strerror}); another process holds the port: "
                "stop it or pass --rollout-bind with a free port"
            ) from None


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
        self.metrics = LearnerMetrics()

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.monotonic() - self.start

    def publish(self) -> float:
        t0 = time.perf_counter()
        header, blob = pack_weights(
            self.version,
            numpy_state(self.trainer.policy),
            model=self.trainer.policy.spec,
            learner_step=self.trainer.updates,
            env_steps=self.env_steps,
            extra={"env_id": self.s.env_id, "run_id": self.s.run_id},
        )
        self.store.publish(header, blob)
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
        t_publish = self.publish()
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


def save_final_weights(path: Path, policy: ActorCritic, meta: dict[str, Any]) -> None:
    torch.save({"state_dict": policy.state_dict(), "metadata": meta}, path)


def run_learner(settings: LearnerSettings) -> int:
    if not settings.run_dir:
        settings = settings.model_copy(update={"run_dir": f"runs/{settings.run_id}"})
    torch.set_num_threads(1)
    torch.manual_seed(settings.seed)
    np.random.seed(settings.seed)
    spec = rollout_spec_for(
        settings.env_id,
        run_id=settings.run_id,
        num_steps=settings.num_steps,
        max_bytes=settings.max_message_bytes,
    )
    _check_port_free(settings.rollout_bind)
    try:
        start_metrics_server(settings.metrics_port)
    except OSError as exc:
        raise UsageError(str(exc)) from None
    redis = connect_redis(settings.redis_url)
    store = WeightStore(redis, settings.run_id, keep_versions=settings.keep_versions)

    policy = ActorCritic(model_spec_for(spec, settings.hidden))
    trainer = PPOTrainer(policy=policy, config=PPOConfig.from_settings(settings))
    run_dir = Path(settings.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = load_checkpoint(settings.run_dir)
    counters = None
    latest = store.latest_version()
    version = 0 if latest is None else latest + 1
    if ckpt is not None:
        if ckpt.get("run_id") != settings.run_id or ckpt.get("env_id") != settings.env_id:
            raise UsageError(
                f"{run_dir / CKPT_NAME} belongs to run {ckpt.get('run_id')!r} "
                f"({ckpt.get('env_id')}); use another --run-dir or the same --run-id"
            )
        trainer.set_state(ckpt["trainer"])
        counters = ckpt["counters"]
        # Versions only rise: resume above both the checkpoint and whatever Redis holds.
        version = max(version, int(ckpt["version"]) + 1)
        log.info("resumed from %s at version %d", run_dir / CKPT_NAME, ckpt["version"])
    (run_dir / "learner_settings.json").write_text(
        json.dumps(settings_snapshot(settings), indent=2) + "\n"
    )

    threshold = settings.target_return
    if threshold is None:
        import gymnasium as gym

        threshold = gym.spec(settings.env_id).reward_threshold
    recorder = RunRecorder(run_dir, solve_threshold=threshold)
    batches: queue.Queue[RolloutBatch] = queue.Queue(maxsize=settings.queue_batches)
    receiver = BatchReceiver(
        make_socket=lambda: RolloutReceiver(
            settings.rollout_bind,
            hwm=settings.rollout_hwm,
            heartbeat_ivl_ms=settings.heartbeat_ivl_ms,
            heartbeat_timeout_ms=settings.heartbeat_timeout_ms,
            max_message_bytes=settings.max_message_bytes,
        ),
        spec=spec,
        out=batches,
    )
    loop = LearnerLoop(
        settings=settings,
        trainer=trainer,
        store=store,
        redis=redis,
        batches=batches,
        recorder=recorder,
        version=version,
        counters=counters,
    )
    stop = WarmStop("the current update").install()
    loop.publish()
    log.info("published version %d; receiving rollouts on %s", version, settings.rollout_bind)
    receiver.start()
    receiver.ready.wait()
    if receiver.error is not None:
        raise UsageError(f"cannot bind {settings.rollout_bind}: {receiver.error}")
    last_log = 0.0
    try:
        while not stop.requested and not loop.done():
            _, loop.decode_rejects = receiver.snapshot()
            if not loop.step(stop):
                continue
            if time.monotonic() - last_log > 2.0:
                last_log = time.monotonic()
                r = loop.last_stats
                log.info(
                    "v=%d steps=%d sps=%.0f return20=%s rejects=%s",
                    loop.version,
                    loop.env_steps,
                    r["charts/SPS"],
                    "n/a"
                    if r["charts/mean_return_20"] is None
                    else f"{r['charts/mean_return_20']:.1f}",
                    loop.rejects(),
                )
    finally:
        receiver.stop()
        receiver.join(timeout=5)
        _, loop.decode_rejects = receiver.snapshot()
        loop.checkpoint()
        loop.write_status()
        recorder.close()
    finish_run(loop, settings, threshold)
    return 0


def finish_run(loop: LearnerLoop, settings: LearnerSettings, threshold: float | None) -> None:
    """Final weights, evaluation, summary.json and the learning-curve PNG."""
    from ppomq.evaluate import evaluate_policy

    run_dir = Path(settings.run_dir)
    meta = {
        "version": loop.version,
        "env_id": settings.env_id,
        "run_id": settings.run_id,
        "env_steps": loop.env_steps,
        "model": loop.trainer.policy.spec,
    }
    save_final_weights(run_dir / "final_weights.pt", loop.trainer.policy, meta)
    eval_return = None
    if settings.eval_episodes > 0:
        eval_return = evaluate_policy(
            loop.trainer.policy,
            settings.env_id,
            episodes=settings.eval_episodes,
            seed=settings.seed + 10_000,
        )
    wall = loop.wall_s
    phases = dict(loop.phase_totals)
    rejects = loop.rejects()
    summary = {
        "env_id": settings.env_id,
        "mode": settings.mode,
        "actors": settings.actors,
        "run_id": settings.run_id,
        "total_env_steps": loop.env_steps,
        "trained_samples": loop.trained_samples,
        "wall_seconds": round(wall, 3),
        "sps": round(loop.env_steps / max(wall, 1e-9), 1),
        "versions": loop.version,
        "batches_produced": loop.produced_batches,
        "batches_accepted": loop.gate.accepted,
        "batches_rejected": rejects,
        "waste_ratio": (sum(rejects.values()) / loop.produced_batches)
        if loop.produced_batches
        else 0.0,
        "policy_age_histogram": {str(k): v for k, v in sorted(loop.gate.ages.items())},
        "learner_time_s": {k: round(v, 3) for k, v in phases.items()},
        "solve_threshold": threshold,
        "solved_at_env_steps": loop.recorder.solved_at_env_steps,
        "solved_at_wall_s": loop.recorder.solved_at_wall_s,
        # Learner clock -> Unix time: solved_at_unix = started_unix + solved_at_wall_s -
        # resumed_wall_s (a resumed run's clock starts at the wall time it had reached).
        "started_unix": round(loop.start_unix, 6),
        "resumed_wall_s": round(loop.wall_offset, 3),
        "final_mean_return_20": loop.recorder.mean_return,
        "final_eval_return": eval_return,
        "episodes": loop.recorder.episodes,
    }
    loop.recorder.write_json("summary.json", summary)
    if loop.recorder.episodes:
        plot_learning_curve(run_dir, threshold=threshold)
    log.info("run finished: %s", json.dumps(summary))
