"""`ppomq learner`: the shell around PPOTrainer — receive, gate, train, publish, record.

Wiring, in order: settings -> logging -> Redis store -> policy (fresh or resumed) ->
publish the first version -> receiving thread -> LearnerLoop (loop.py). Stopping: the first
SIGTERM/SIGINT finishes the current update, checkpoints, evaluates and writes the summary;
a second skips the rest of the update and the evaluation but still writes the checkpoint
and the summary (ppomq.core.signals). Exit 0 only when the run reached its end (total steps,
duration, target return); stopped before that by a signal, 128 + the signal (143 for
SIGTERM), so that a Kubernetes Job or compose's `restart: on-failure` starts it again; 5
when the run dir (or Redis's data) cannot be written, after writing what still fits; 2 for
a checkpoint that does not verify (recovery.py: --recover is the way on).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import queue
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from redis.exceptions import RedisError
from redis.retry import Retry

from ppomq.core.envs import rollout_spec_for
from ppomq.core.errors import StorageFullError, UsageError
from ppomq.core.metrics import LearnerMetrics
from ppomq.core.models import build_model, load_numpy_state, model_spec_for
from ppomq.core.rundir import FINISHED_FILE, RecordsDamaged, RunRecorder, write_json_atomic
from ppomq.core.service_shell import service_shell
from ppomq.core.settings import LearnerSettings, settings_snapshot
from ppomq.core.signals import FastStop, WarmStop
from ppomq.core.storage import storage_error
from ppomq.core.store.connect import wait_for_redis
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import WeightStore
from ppomq.core.transport.curvezmq import server_from_settings
from ppomq.core.transport.rollouts import RolloutReceiver
from ppomq.learner.checkpoint import CKPT_NAME
from ppomq.learner.device import describe, resolve_device, resolve_threads
from ppomq.learner.episodes import EpisodeBook
from ppomq.learner.finish import finish_run
from ppomq.learner.loop import PUBLISH_BACKOFF, LearnerLoop
from ppomq.learner.receiver import BatchQueue, BatchReceiver
from ppomq.learner.recovery import choose_start, rebuild_from_records
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from ppomq.proto import RolloutBatch, SeqTracker
from ppomq.proto.weights_blob import unpack_tensors

log = logging.getLogger("ppomq.learner")


def _check_port_free(endpoint: str) -> None:
    """A taken tcp port is a user error with a fix, not a ZMQError traceback."""
    if not endpoint.startswith("tcp://"):
        return
    host, _, port = endpoint[6:].rpartition(":")
    host = "0.0.0.0" if host in ("*", "") else host
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As ZeroMQ binds: a restarted learner's own old connections in TIME_WAIT (60 s
        # after a crash) must not read as "port taken"; a live listener still does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as exc:
            raise UsageError(
                f"cannot bind {endpoint} ({exc.strerror}); another process holds the port: "
                "stop it or pass --rollout-bind with a free port"
            ) from None


def run_learner(settings: LearnerSettings) -> int:
    if not settings.run_dir:
        settings = settings.model_copy(update={"run_dir": f"runs/{settings.run_id}"})
    # First, before the service starts: a --device the machine lacks is a one-line usage
    # error, and nothing else is said.
    device = resolve_device(settings.device)
    finished = False
    with service_shell(
        "learner", metrics_port=settings.metrics_port, unit_of_work="the current update"
    ) as stop:
        try:
            finished = _serve(settings, stop, device)
        except (OSError, RedisError) as exc:  # e.g. starting on a disk that is full
            full = storage_error(exc, run_dir=settings.run_dir)
            if full is None:
                raise
            raise full from None
    return stop.exit_code(finished=finished)


def _serve(settings: LearnerSettings, stop: WarmStop, device: torch.device) -> bool:
    """Train until the run's end (True) or a stop signal (False)."""
    # Threads: 1 by default (--torch-threads), as it always was: on a shared machine
    # (`ppomq train`, compose) the actors want the other cores, and the CartPole update
    # gains little from more (benchmarks/results/learner_threads.md). A learner with cores
    # of its own (a pod's CPU request) sets their number; 0: every CPU it may run on.
    torch.set_num_threads(resolve_threads(settings.torch_threads))
    log.info("learner on %s (--device %s), %d CPU thread(s) (--torch-threads %d)",
             describe(device), settings.device, torch.get_num_threads(),
             settings.torch_threads)  # fmt: skip
    torch.manual_seed(settings.seed)
    np.random.seed(settings.seed)
    spec = rollout_spec_for(
        settings.env_id,
        run_id=settings.run_id,
        num_steps=settings.num_steps,
        max_bytes=settings.max_message_bytes,
    )
    _check_port_free(settings.rollout_bind)
    # A bad key file, or a bind beyond loopback without CURVE: one line, exit 2, at start.
    curve = server_from_settings(settings, bind=settings.rollout_bind, bind_flag="--rollout-bind")
    # Redis may come up after the learner (a pod started first): wait, bounded and logged,
    # rather than exit 4 and crash-loop.
    redis = wait_for_redis(settings.redis_url)
    store = WeightStore(redis, settings.run_id, keep_versions=settings.keep_versions)

    if settings.anneal_lr and not settings.total_steps:
        log.warning(
            "learning-rate annealing is off: it anneals to 0 at --total-steps, which is 0 "
            "(no limit); set --total-steps for a finite run, or --no-anneal-lr"
        )

    policy = build_model(
        model_spec_for(
            spec,
            arch=settings.arch,
            hidden=settings.hidden,
            activation=settings.activation,
            norm_obs=settings.norm_obs,
            lstm_size=settings.lstm_size,
        )
    )
    if getattr(policy, "recurrent", False):
        # Every batch must then carry its envs' state at step 0 (ROLLOUT.md hidden_state).
        spec = dataclasses.replace(spec, hidden_shape=tuple(policy.state_shape))
    trainer = PPOTrainer(policy=policy, config=PPOConfig.from_settings(settings), device=device)
    run_dir = Path(settings.run_dir)
    start = choose_start(run_dir, store, recover=settings.recover)
    ckpt = start.state
    if ckpt is not None and (
        ckpt.get("run_id") != settings.run_id or ckpt.get("env_id") != settings.env_id
    ):
        raise UsageError(
            f"{run_dir / CKPT_NAME} belongs to run {ckpt.get('run_id')!r} "
            f"({ckpt.get('env_id')}); use another --run-dir or the same --run-id"
        )
    new_run = False
    marker = redis.get(RunKeys(settings.run_id).finished)
    ckpt_finished = ckpt is not None and bool(ckpt.get("finished"))
    if (ckpt_finished or (ckpt is None and marker is not None)) and not settings.resume:
        # The run ended normally: a new start is a new run under the same run id, with
        # fresh weights and counters. Its versions go on from the finished run's newest,
        # so that weightservers and actors, which only ever move forward, follow it.
        new_run = True
        if ckpt is not None:
            moved = move_aside(run_dir)
            log.info("run %r had finished; its run dir is now %s", settings.run_id, moved)
            ckpt = None
    elif ckpt_finished or marker is not None:
        log.info("run %r had finished; going on with it (--resume)", settings.run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "learner_settings.json", settings_snapshot(settings))

    threshold = settings.target_return
    if threshold is None:
        import gymnasium as gym

        # "module:EnvId" (Gymnasium's own form) names a module to import, then the id.
        threshold = gym.spec(settings.env_id.rpartition(":")[2]).reward_threshold
    recorder = RunRecorder(run_dir, solve_threshold=threshold)
    batches: queue.Queue[RolloutBatch] = BatchQueue(maxsize=settings.queue_batches)
    # Checked by the receiver, recorded by the loop on acceptance; bounded as the ledger is.
    seqs = SeqTracker(max_actors=settings.max_actors)
    book = EpisodeBook(max_actors=settings.max_actors)  # the door's and the loop's
    receiver = BatchReceiver(
        make_socket=lambda: RolloutReceiver(
            settings.rollout_bind,
            hwm=settings.rollout_hwm,
            heartbeat_ivl_ms=settings.heartbeat_ivl_ms,
            heartbeat_timeout_ms=settings.heartbeat_timeout_ms,
            max_message_bytes=settings.max_message_bytes,
            curve=curve,
        ),
        spec=spec,
        out=batches,
        # Async: a full queue drops its oldest batch for the newest (counted as surplus)
        # rather than blocking actors; sync needs every actor's batch, so it blocks.
        drop_oldest=settings.mode == "async",
        seqs=seqs,
        book=book,
    )
    loop = LearnerLoop(
        settings=settings,
        trainer=trainer,
        store=store,
        redis=redis,
        batches=batches,
        recorder=recorder,
        version=0,
        metrics=LearnerMetrics(),  # exported on --metrics-port
        seqs=seqs,
        book=book,
    )
    loop.receiver = receiver  # its counts and refused senders reach the ledger and status
    try:
        resumed = resume(loop, ckpt, new_run=new_run, rebuild=start.rebuild and not new_run)
    except RecordsDamaged as exc:
        raise UsageError(
            f"{exc}: the run's records cannot be trusted; repair or delete that line, or "
            "pass another --run-dir to start a new run"
        ) from None
    if not resumed:
        log.info("run %r already reached its end (%d env steps, version %d): nothing to "
                 "train; raise --total-steps (or --duration-s) to go on with it",
                 settings.run_id, loop.env_steps, loop.version)  # fmt: skip
        recorder.close()
        # Said again in Redis only (a new marker: weightservers that took the old one for
        # an earlier run's tell their actors and exit); the run dir stays as it was.
        doc = {"version": loop.version, "env_steps": loop.env_steps, "unix": round(time.time(), 3)}
        redis.set(loop.keys.finished, json.dumps(doc))
        return True
    redis.delete(loop.keys.finished)  # this run is going on: no longer finished
    loop.publish(stop)
    loop.checkpoint()  # a restart from here on always resumes, and its CSVs match the summary
    log.info("published version %d", loop.version)
    log.info("receiving rollouts on %s%s", settings.rollout_bind,
             f" (CURVE, allow-list {curve.allowed_dir})" if curve else "")  # fmt: skip
    receiver.start()
    receiver.ready.wait()
    if receiver.error is not None:
        raise UsageError(f"cannot bind {settings.rollout_bind}: {receiver.error}")
    last_log = 0.0
    finished = False
    disk: StorageFullError | None = None
    try:
        while not stop.requested and not loop.done():
            loop.poll_receiver()
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
        finished = loop.done()  # the run's end was reached (not a stop signal)
    except FastStop:
        pass  # a second signal: skip the rest of the update, clean up below
    except (OSError, RedisError) as exc:
        # A full or read-only disk: stop as for a signal, saying so, and write what can
        # still be written; anything else is a crash (the launcher restarts the learner).
        full = storage_error(exc, run_dir=run_dir)
        if full is None:
            raise
        log.error("%s; stopping the run", full)
        stop.requested = stop.fast = True  # as a second signal: no evaluation on the way out
        disk = full
    finally:
        with stop.shielded():
            receiver.stop()
            receiver.join(timeout=5)
            loop.poll_receiver()
            for cleanup in (loop.checkpoint, loop.write_status, recorder.close):
                disk = _storage_guarded(cleanup, run_dir) or disk
    disk = finish_run(loop, settings, threshold, stop) or disk
    if disk is not None:
        raise disk  # exit 5 in one line: restarting cannot help
    if finished:
        mark_finished(loop)
    return finished


def _storage_guarded(write: Callable[[], object], run_dir: Path) -> StorageFullError | None:
    """Run `write`; a full or read-only disk is logged and returned, not raised: the
    learner's way out still writes what it can."""
    try:
        write()
    except (OSError, RedisError) as exc:
        full = storage_error(exc, run_dir=run_dir)
        if full is None:
            raise
        log.error("%s", full)
        return full
    return None


def move_aside(run_dir: Path) -> Path:
    """Rename a finished run's dir to the first free RUN_DIR.N; returns the new path."""
    for n in itertools.count(1):
        target = run_dir.with_name(f"{run_dir.name}.{n}")
        if not target.exists():
            break
    try:
        run_dir.rename(target)
    except OSError as exc:
        raise UsageError(
            f"cannot move the finished run's dir {run_dir} to {target} ({exc.strerror}); "
            "pass another --run-dir, or --resume to go on with the finished run"
        ) from None
    return target


def mark_finished(loop: LearnerLoop) -> None:
    """The run ended normally: say so in Redis (weightservers tell the actors, and all of
    them exit 0), in RUN_DIR/finished.json, then in the checkpoint (a new start is then a
    new run, unless --resume).

    Redis first: a learner that dies between the two restarts from an unfinished
    checkpoint, finds its end already reached and finishes again."""
    doc = {"version": loop.version, "env_steps": loop.env_steps, "unix": round(time.time(), 3)}
    Retry(PUBLISH_BACKOFF, retries=40).call_with_retry(
        lambda: _set_finished(loop, json.dumps(doc)), lambda _exc: None
    )
    write_json_atomic(Path(loop.s.run_dir) / FINISHED_FILE, doc)
    loop.finished = True
    loop.checkpoint()
    log.info("run %r marked finished at version %d", loop.s.run_id, loop.version)


def _set_finished(loop: LearnerLoop, doc: str) -> None:
    """The marker, then the version announced once more on the weights channel: a
    weightserver reads the marker when an announcement wakes it, so it tells its actors now
    rather than at its next poll."""
    pipe = loop.redis.pipeline(transaction=True)
    pipe.set(loop.keys.finished, doc)
    pipe.publish(loop.keys.channel, str(loop.version))
    pipe.execute()


def resume(
    loop: LearnerLoop,
    ckpt: dict[str, Any] | None,
    *,
    new_run: bool = False,
    rebuild: bool = False,
) -> bool:
    """Set the loop's state from the checkpoint and Redis, at a version to publish now;
    False (nothing to publish) when the checkpoint is of a finished run whose end the
    settings have already reached: the same command run again has nothing to train.

    Versions only rise and a version never carries older weights than the one before it.
    Redis may hold versions the checkpoint does not (published after it was written): the
    newest of them is adopted as the policy (the optimizer moments and counters come from
    the checkpoint). The newest weights are then published under the next number, because
    actors that sent their batch to the learner that died wait for a version above the
    one they hold before they send again."""
    latest = loop.store.latest_version()
    if new_run:
        loop.version = 0 if latest is None else latest + 1
        log.info("run %r had finished at version %s; a new run starts at version %d with "
                 "fresh weights (pass --resume to go on with the finished one instead)",
                 loop.s.run_id, latest, loop.version)  # fmt: skip
        return True
    if rebuild:  # --recover without a checkpoint to trust (recovery.choose_start)
        loop.version = rebuild_from_records(loop) + 1
        return True
    if ckpt is None and latest is None:
        loop.version = 0
        return True
    version = -1
    if ckpt is not None:
        loop.restore(ckpt)
        version = int(ckpt["version"])
        if ckpt.get("finished") and loop.done():
            loop.restarts -= 1  # not a restart: nothing runs
            loop.version = version
            return False
    if latest is not None and latest > version:
        # Redis is ahead of the checkpoint, or there is none (killed before its first, or
        # a new run dir for the same run id): the run goes on from its newest weights.
        header, blob = loop.store.fetch(latest, verify=True)
        if header.model != loop.trainer.policy.spec:
            raise UsageError(
                f"run {loop.s.run_id!r} in Redis holds another model ({header.model}); "
                "pass the same model settings or another --run-id"
            )
        load_numpy_state(loop.trainer.policy, unpack_tensors(header, blob))
        log.info("resuming from %s (version %d) with the weights of version %d from Redis, "
                 "which are newer", loop.s.run_dir, version, latest)  # fmt: skip
        version = latest
    loop.version = version + 1
    log.info("resumed from %s; version %d has the weights of version %d", loop.s.run_dir,
             loop.version, version)  # fmt: skip
    return True
