"""`ppomq learner`: the shell around PPOTrainer — receive, gate, train, publish, record.

Wiring, in order: settings -> logging -> Redis store -> policy (fresh or resumed) ->
publish the first version -> receiving thread -> LearnerLoop (loop.py). Stopping: the first
SIGTERM/SIGINT finishes the current update, checkpoints, evaluates and writes the summary;
a second skips the rest of the update and the evaluation but still writes the checkpoint
and the summary (ppomq.core.signals). Exit 0 only when the run reached its end (total steps,
duration, target return); stopped before that by a signal, 128 + the signal (143 for
SIGTERM), so that a Kubernetes Job or compose's `restart: on-failure` starts it again; 5
when the run dir (or Redis's data) cannot be written, after writing what still fits; 2 for
a checkpoint that does not verify (recovery.py: --recover is the way on); 6 when a rank of
its learner group was lost (group.py: the group restarts together).

In a learner group (torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
rank 0 does all of the above for the group; every other rank receives and trains, and
touches neither Redis nor the run dir. Rank 0's starting state (fresh or resumed) is
broadcast to the others, so every rank starts from the same parameters and counters.
"""

from __future__ import annotations

import dataclasses
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

from ppomq.core.envs import rollout_spec_for
from ppomq.core.errors import StorageFullError, UsageError
from ppomq.core.events import events_writer
from ppomq.core.metrics import LearnerMetrics
from ppomq.core.models import build_model, model_spec_for
from ppomq.core.models.init import apply_init
from ppomq.core.rundir import RecordsDamaged, RunRecorder, write_json_atomic
from ppomq.core.service_shell import service_shell
from ppomq.core.settings import LearnerSettings, settings_snapshot
from ppomq.core.signals import FastStop, WarmStop
from ppomq.core.storage import storage_error
from ppomq.core.store.connect import wait_for_redis
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import WeightStore
from ppomq.core.transport.curvezmq import server_from_settings
from ppomq.core.transport.rollouts import RolloutReceiver
from ppomq.learner.checkpoint import CKPT_NAME, weights_digest
from ppomq.learner.device import describe, resolve_device, resolve_threads
from ppomq.learner.door import Door
from ppomq.learner.episodes import EpisodeBook
from ppomq.learner.finish import finish_run, mark_finished
from ppomq.learner.grants import GrantBook
from ppomq.learner.group import GroupLostError, GroupSpec, LearnerGroup, pick_backend
from ppomq.learner.loop import LearnerLoop, build_loop
from ppomq.learner.publisher import batches_per_version
from ppomq.learner.receiver import BatchQueue, BatchReceiver
from ppomq.learner.recovery import choose_start, move_aside, resume
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from ppomq.proto import RolloutBatch, RolloutSpec, SeqTracker

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


def with_port_offset(endpoint: str, offset: int) -> str:
    """`endpoint` with its TCP port moved up by `offset` (a group's ranks on one host each
    bind --rollout-bind's port plus LOCAL_RANK)."""
    if not offset or not endpoint.startswith("tcp://"):
        return endpoint
    host, _, port = endpoint.rpartition(":")
    return f"{host}:{int(port) + offset}"


def advertised(settings: LearnerSettings) -> str:
    """Where this rank's actors connect: --rollout-advertise, else the bind with a
    wildcard host replaced by this host's name."""
    if settings.rollout_advertise:
        return settings.rollout_advertise
    bind = settings.rollout_bind
    if not bind.startswith("tcp://"):
        return bind
    host, _, port = bind[6:].rpartition(":")
    if host in ("*", "0.0.0.0", "", "[::]", "::", "[*]"):
        host = socket.getfqdn()
    return f"tcp://{host}:{port}"


def run_learner(settings: LearnerSettings) -> int:
    if not settings.run_dir:
        settings = settings.model_copy(update={"run_dir": f"runs/{settings.run_id}"})
    # First, before the service starts: a --device the machine lacks, or a half-given
    # group environment, is a one-line usage error, and nothing else is said.
    spec = GroupSpec.from_env()
    device = resolve_device(settings.device)
    if spec is not None:
        settings = settings.model_copy(
            update={"rollout_bind": with_port_offset(settings.rollout_bind, spec.local_rank)}
        )
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", spec.local_rank)
    finished = False
    with service_shell(
        "learner", metrics_port=settings.metrics_port, unit_of_work="the current update"
    ) as stop:
        try:
            finished = _serve(settings, stop, device, spec)
        except (OSError, RedisError) as exc:  # e.g. starting on a disk that is full
            full = storage_error(exc, run_dir=settings.run_dir)
            if full is None:
                raise
            raise full from None
    return stop.exit_code(finished=finished)


def _serve(
    settings: LearnerSettings, stop: WarmStop, device: torch.device, group_spec: GroupSpec | None
) -> bool:
    """Train until the run's end (True) or a stop signal (False)."""
    # Threads: 1 by default (--torch-threads): on a shared machine (`ppomq train`,
    # compose) the actors want the other cores, and the CartPole update gains little from
    # more (benchmarks/results/learner_threads.md). A learner with cores of its own (a
    # pod's CPU request) sets their number; 0: every CPU it may run on.
    torch.set_num_threads(resolve_threads(settings.torch_threads))
    log.info("learner on %s (--device %s), %d CPU thread(s) (--torch-threads %d)",
             describe(device), settings.device, torch.get_num_threads(),
             settings.torch_threads)  # fmt: skip
    _check_port_free(settings.rollout_bind)
    # A bad key file, or a bind beyond loopback without CURVE: one line, exit 2, at start.
    curve = server_from_settings(settings, bind=settings.rollout_bind, bind_flag="--rollout-bind")
    group = None
    if group_spec is not None:
        group = LearnerGroup(
            group_spec,
            backend=pick_backend(settings.group_backend, device),
            timeout_s=settings.group_timeout_s,
            device=device,
        )
    try:
        return _serve_in(settings, stop, device, curve, group)
    finally:
        if group is not None:
            group.close()


def _serve_in(
    settings: LearnerSettings,
    stop: WarmStop,
    device: torch.device,
    curve: Any,
    group: LearnerGroup | None,
) -> bool:
    if group is not None and not group.lead:
        return _serve_member(settings, stop, device, curve, group)
    spec, trainer = _build_trainer(settings, device, group)
    # Every rank's endpoint, published to the actors with the weights.
    learners = None if group is None else group.share(advertised(settings))
    # Redis may come up after the learner (a pod started first): wait, bounded and logged,
    # rather than exit 4 and crash-loop.
    redis = wait_for_redis(settings.redis_url)
    store = WeightStore(redis, settings.run_id, keep_versions=settings.keep_versions)
    if settings.anneal_lr and not (settings.anneal_lr_steps or settings.total_steps):
        log.warning(
            "learning-rate annealing is off: it anneals to 0 at --anneal-lr-steps or else "
            "--total-steps, and both are 0 (no limit); set either, or --no-anneal-lr"
        )
    run_dir = Path(settings.run_dir)
    start = choose_start(run_dir, store, recover=settings.recover)
    ckpt, new_run = _new_run_or_not(settings, start.state, redis)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "learner_settings.json", settings_snapshot(settings))
    threshold = _solve_threshold(settings)

    # Shared by the receiving thread and the loop, each built with them.
    door = Door()
    seqs = SeqTracker(max_actors=settings.max_actors)  # checked at the door, recorded on acceptance
    book = EpisodeBook(max_actors=settings.max_actors)
    batches: queue.Queue[RolloutBatch] = BatchQueue(maxsize=settings.queue_batches)
    loop = build_loop(
        settings=settings,
        trainer=trainer,
        store=store,
        batches=batches,
        recorder=RunRecorder(run_dir, solve_threshold=threshold),
        door=door,
        seqs=seqs,
        book=book,
        metrics=LearnerMetrics(),  # exported on --metrics-port
        group=group,
        learners=learners,
    )
    receiver = _receiver(settings, spec, curve, batches, door, seqs, book, loop.grants)
    going = _start(loop, ckpt, new_run=new_run, rebuild=start.rebuild and not new_run, stop=stop)
    if group is not None:
        group.broadcast(_group_start(loop, going))
    if not going:
        return True
    _start_receiving(settings, receiver, curve)
    events = events_writer(settings, "learner")
    events.emit("learner.ready", version=loop.run.version, env_steps=loop.run.env_steps)
    finished, disk = _train(loop, receiver, stop)
    if group is not None:
        # Every rank logs the digest of the weights it ends with: they are the same.
        log.info("learner rank 0 done at version %d; weights sha256 %s", loop.run.version,
                 weights_digest(trainer.host_state()))  # fmt: skip
    disk = finish_run(loop, settings, threshold, stop, events) or disk
    events.emit("learner.stop", version=loop.run.version, env_steps=loop.run.env_steps,
                finished=finished, last_update_t=loop.run.updated_at)  # fmt: skip
    events.close()
    if disk is not None:
        raise disk  # exit 5 in one line: restarting cannot help
    if finished:
        mark_finished(loop)
    return finished


def _start_receiving(settings: LearnerSettings, receiver: BatchReceiver, curve: Any) -> None:
    log.info("receiving rollouts on %s%s", settings.rollout_bind,
             f" (CURVE, allow-list {curve.allowed_dir})" if curve else "")  # fmt: skip
    receiver.start()
    receiver.ready.wait()
    if receiver.error is not None:
        raise UsageError(f"cannot bind {settings.rollout_bind}: {receiver.error}")


def _group_start(loop: LearnerLoop, going: bool) -> dict[str, Any]:
    """What rank 0 hands every other rank at the start: whether the run goes on, and the
    state it goes on from (the trainer's, the version, the run's counters, and each rank's
    own admission state from the checkpoint, when the group had the same size)."""
    if not going:
        return {"going": False}
    run = loop.run
    members = loop.member_states
    assert loop.group is not None
    return {
        "going": True,
        "trainer": loop.trainer.get_state(),
        "version": run.version,
        "env_steps": run.env_steps,
        "trained_samples": run.trained_samples,
        "wall_s": run.wall_s,
        "members": members if len(members) == loop.group.world_size - 1 else [],
    }


def _serve_member(
    settings: LearnerSettings,
    stop: WarmStop,
    device: torch.device,
    curve: Any,
    group: LearnerGroup,
) -> bool:
    """A rank other than 0: receive and train with the group; rank 0 publishes, records and
    checkpoints. True when the run reached its end."""
    spec, trainer = _build_trainer(settings, device, group)
    group.share(advertised(settings))
    door = Door()
    seqs = SeqTracker(max_actors=settings.max_actors)
    book = EpisodeBook(max_actors=settings.max_actors)
    batches: queue.Queue[RolloutBatch] = BatchQueue(maxsize=settings.queue_batches)
    loop = build_loop(
        settings=settings, trainer=trainer, store=None, batches=batches, recorder=None,
        door=door, seqs=seqs, book=book, metrics=LearnerMetrics(), group=group,
    )  # fmt: skip
    receiver = _receiver(settings, spec, curve, batches, door, seqs, book, loop.grants)
    start = group.broadcast(None)
    if not start["going"]:
        return True
    trainer.set_state(start["trainer"])
    if start["members"]:
        loop.admission.set_state(start["members"][group.rank - 1])
    run = loop.run
    run.version, run.env_steps = int(start["version"]), int(start["env_steps"])
    run.trained_samples = int(start["trained_samples"])
    run.restart_clock(float(start["wall_s"]))
    _start_receiving(settings, receiver, curve)
    finished, _ = _train(loop, receiver, stop)
    log.info("learner rank %d done at version %d (%d env steps for the group); weights "
             "sha256 %s", group.rank, run.version, run.env_steps,
             weights_digest(trainer.host_state()))  # fmt: skip
    return finished


def _receiver(
    settings: LearnerSettings,
    spec: RolloutSpec,
    curve: Any,
    out: queue.Queue[RolloutBatch],
    door: Door,
    seqs: SeqTracker,
    book: EpisodeBook,
    grants: GrantBook | None,
) -> BatchReceiver:
    return BatchReceiver(
        make_socket=lambda: RolloutReceiver(
            settings.rollout_bind,
            hwm=settings.rollout_hwm,
            heartbeat_ivl_ms=settings.heartbeat_ivl_ms,
            heartbeat_timeout_ms=settings.heartbeat_timeout_ms,
            max_message_bytes=settings.max_message_bytes,
            curve=curve,
        ),
        spec=spec,
        out=out,
        door=door,
        seqs=seqs,
        book=book,
        # Actors that run ahead (async, --batches-per-version 0): a full queue drops its
        # oldest batch for the newest (counted as surplus) rather than blocking them. With
        # grants every batch that passes the door is one an update takes, so it blocks.
        drop_oldest=settings.mode == "async" and not batches_per_version(settings),
        grants=grants,
    )


def _build_trainer(
    settings: LearnerSettings, device: torch.device, group: LearnerGroup | None = None
) -> tuple[RolloutSpec, PPOTrainer]:
    """The wire spec batches must meet, and the trainer with a fresh policy on `device`."""
    torch.manual_seed(settings.seed)
    np.random.seed(settings.seed)
    spec = rollout_spec_for(
        settings.env_id,
        run_id=settings.run_id,
        num_steps=settings.num_steps,
        max_bytes=settings.max_message_bytes,
    )
    model_spec = model_spec_for(
        spec,
        arch=settings.arch,
        hidden=settings.hidden,
        activation=settings.activation,
        norm_obs=settings.norm_obs,
        lstm_size=settings.lstm_size,
    )
    policy = apply_init(build_model(model_spec), settings.init)
    if getattr(policy, "recurrent", False):
        # Every batch must then carry its envs' state at step 0 (ROLLOUT.md hidden_state).
        spec = dataclasses.replace(spec, hidden_shape=tuple(policy.state_shape))
    trainer = PPOTrainer(
        policy=policy, config=PPOConfig.from_settings(settings), device=device, group=group
    )
    return spec, trainer


def _new_run_or_not(
    settings: LearnerSettings, ckpt: dict[str, Any] | None, redis: Any
) -> tuple[dict[str, Any] | None, bool]:
    """(the checkpoint to resume from, whether this start is a new run under the run id).

    A run that ended normally starts again as a new run, with fresh weights and counters,
    unless --resume; its versions go on from the finished run's newest, so that
    weightservers and actors, which only ever move forward, follow it."""
    run_dir = Path(settings.run_dir)
    if ckpt is not None and (
        ckpt.get("run_id") != settings.run_id or ckpt.get("env_id") != settings.env_id
    ):
        raise UsageError(
            f"{run_dir / CKPT_NAME} belongs to run {ckpt.get('run_id')!r} "
            f"({ckpt.get('env_id')}); use another --run-dir or the same --run-id"
        )
    marker = redis.get(RunKeys(settings.run_id).finished)
    ckpt_finished = ckpt is not None and bool(ckpt.get("finished"))
    if (ckpt_finished or (ckpt is None and marker is not None)) and not settings.resume:
        if ckpt is not None:
            moved = move_aside(run_dir)
            log.info("run %r had finished; its run dir is now %s", settings.run_id, moved)
        return None, True
    if ckpt_finished or marker is not None:
        log.info("run %r had finished; going on with it (--resume)", settings.run_id)
    return ckpt, False


def _solve_threshold(settings: LearnerSettings) -> float | None:
    """--target-return, else the env's own reward threshold (None: it has none)."""
    if settings.target_return is not None:
        return settings.target_return
    import gymnasium as gym

    # "module:EnvId" (Gymnasium's own form) names a module to import, then the id.
    return gym.spec(settings.env_id.rpartition(":")[2]).reward_threshold


def _start(
    loop: LearnerLoop,
    ckpt: dict[str, Any] | None,
    *,
    new_run: bool,
    rebuild: bool,
    stop: WarmStop,
) -> bool:
    """Resume the loop's state and publish its first version; False when the run had
    already reached its end (nothing to train)."""
    try:
        resumed = resume(loop, ckpt, new_run=new_run, rebuild=rebuild)
    except RecordsDamaged as exc:
        raise UsageError(
            f"{exc}: the run's records cannot be trusted; repair or delete that line, or "
            "pass another --run-dir to start a new run"
        ) from None
    run = loop.run
    if not resumed:
        log.info("run %r already reached its end (%d env steps, version %d): nothing to "
                 "train; raise --total-steps (or --duration-s) to go on with it",
                 loop.s.run_id, run.env_steps, run.version)  # fmt: skip
        run.recorder.close()
        # Said again in Redis only (a new marker: weightservers that took the old one for
        # an earlier run's tell their actors and exit); the run dir stays as it was.
        loop.publisher.mark_finished(run.version, run.env_steps, announce=False)
        return False
    loop.publisher.clear_finished()  # this run is going on: no longer finished
    loop.publish(stop)
    loop.checkpoint()  # a restart from here on always resumes, and its CSVs match the summary
    log.info("published version %d", run.version)
    return True


def _train(
    loop: LearnerLoop, receiver: BatchReceiver, stop: WarmStop
) -> tuple[bool, StorageFullError | None]:
    """Updates until the run's end or a stop; then the checkpoint, the status and the
    records, written whatever stopped it. (whether the end was reached, a full disk)."""
    run_dir = Path(loop.s.run_dir)
    last_log = 0.0
    finished = False
    disk: StorageFullError | None = None
    lost = False
    try:
        while not loop.ended(stop):
            loop.take_door()
            if not loop.step(stop):
                continue
            if time.monotonic() - last_log > 2.0:
                last_log = time.monotonic()
                _log_progress(loop)
        finished = loop.run.done()  # the run's end was reached (not a stop signal)
        if loop.group is not None:
            loop.share_states()  # every rank's counters for the summary and the checkpoint
    except FastStop:
        pass  # a second signal: skip the rest of the update, clean up below
    except GroupLostError:
        # Rank 0's counters now hold batches it accepted that the group never trained,
        # and the other ranks' states are as of the last checkpoint: that checkpoint,
        # written at an update every rank agreed on, is the one the group restarts from.
        lost = True
        raise
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
            loop.take_door()
            # Rank 0 of a group writes for it, and no checkpoint of a lost group (its
            # parameters may be half-stepped, its counters ahead of what was trained).
            if loop.lead:
                assert loop.run.recorder is not None
                writes = [loop.write_status, loop.run.recorder.close]
                if not lost:
                    writes.insert(0, loop.checkpoint)
                for write in writes:
                    disk = _storage_guarded(write, run_dir) or disk
    return finished, disk


def _log_progress(loop: LearnerLoop) -> None:
    if not loop.lead:  # rank 0 logs the group's progress; this rank, its own share
        assert loop.group is not None
        log.info("rank %d: v=%d group steps=%d; here %d batches accepted, live actors %d, "
                 "rejects=%s", loop.group.rank, loop.run.version, loop.run.env_steps,
                 loop.admission.gate.accepted, len(loop.admission.roster.live()),
                 loop.admission.rejects())  # fmt: skip
        return
    r = loop.run.last_stats
    mean = r["charts/mean_return_20"]
    log.info("v=%d steps=%d sps=%.0f return20=%s rejects=%s", loop.run.version,
             loop.run.env_steps, r["charts/SPS"], "n/a" if mean is None else f"{mean:.1f}",
             loop.admission.rejects())  # fmt: skip


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
