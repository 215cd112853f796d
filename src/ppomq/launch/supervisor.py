"""Launcher: starts the run's children, watches them and Redis, restarts what crashes."""

from __future__ import annotations

import contextlib
import json
import multiprocessing.connection
import shutil
import time
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialBackoff

from ppomq.core.envs import check_vector_entry_point, spaces_of
from ppomq.core.errors import RedisUnavailableError, StorageFullError, UsageError, UserError
from ppomq.core.events import EVENTS_FILE, EventWriter
from ppomq.core.run_lock import RunDirLock
from ppomq.core.rundir import FINISHED_FILE, REDIS_DIR, write_json_atomic
from ppomq.core.settings import (
    AUTO,
    ActorSettings,
    LearnerSettings,
    TrainSettings,
    WeightserverSettings,
    auto_preset,
    redact_url,
    settings_snapshot,
)
from ppomq.core.storage import storage_text
from ppomq.core.store.connect import connect_redis, make_redis
from ppomq.core.store.embedded import EmbeddedRedis, free_port
from ppomq.core.timeline import Timeline
from ppomq.launch import zygote
from ppomq.launch.child import Child
from ppomq.launch.dataplane import run_keys
from ppomq.launch.evaluation import EVAL_SILENT_S, EvaluationWatch
from ppomq.launch.learning_curve import CurvePainter
from ppomq.launch.messages import error_line, exit_text, first_line, last_error_line, note
from ppomq.launch.shutdown import Shutdown
from ppomq.launch.wiring import child_env, connect_addr, new_run_dir, port_of, subset

# Restarting crashed children: after 0.5 s, doubling to 30 s (redis-py's arithmetic), back
# to 0.5 s once a child has run HEALTHY_S; CRASH_LIMIT crashes within CRASH_WINDOW_S means
# restarting does not help (a bad setting, a broken env), so the run stops and says so.
CRASH_BACKOFF = ExponentialBackoff(cap=30.0, base=0.5)
HEALTHY_S = 30.0
CRASH_LIMIT = 5
CRASH_WINDOW_S = 120.0
# Without Redis nothing is published or recorded: an external Redis unreachable this long
# stops the run (short blips are waited out by the services themselves).
REDIS_DOWN_S = 10.0
# --duration-s / --total-steps are the learner's to honour; if it cannot (stuck on a dead
# peer), the launcher stops the run this long after it should have ended.
DEADLINE_GRACE_S = 20.0
SUPERVISE_TICK_S = 0.25
# A group's rank 0 has --group-timeout-s plus this to leave a group that lost a rank.
GROUP_EXIT_GRACE_S = 5.0


def earlier_env_id(run_dir: Path) -> str | None:
    """The env of the run an earlier launch (or learner) left in `run_dir`, if any."""
    for name in ("settings.json", "learner_settings.json"):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            env_id = json.loads((run_dir / name).read_text()).get("env_id")
            if isinstance(env_id, str):
                return env_id
    return None


class Launcher(Shutdown):
    """Owns every child process of a local run."""

    def __init__(self, settings: TrainSettings) -> None:
        # Fail in one line before starting anything: an unknown env, a missing optional
        # dependency (MuJoCo), observations ppomq cannot train on. --preset auto read the
        # env's spaces already (once per process): the children get the preset it picked.
        if settings.preset == AUTO:
            settings = settings.model_copy(update={"preset": auto_preset(settings.env_id)[0]})
        else:
            spaces_of(settings.env_id)
        if settings.vectorization == "vector_entry_point":
            check_vector_entry_point(settings.env_id)
        made = not settings.run_dir
        if made:
            run_dir = new_run_dir(settings.run_id, settings.env_id)
            settings = settings.model_copy(update={"run_dir": str(run_dir)})
        if not settings.events_file:  # the run's one event stream, every child's included
            events_file = str(Path(settings.run_dir) / EVENTS_FILE)
            settings = settings.model_copy(update={"events_file": events_file})
        self.s = settings
        self.run_dir = Path(settings.run_dir)
        # Made here (a new run dir, or a --run-dir that did not exist): a start that fails
        # before anything trains removes it again (discard_if_unused).
        self.made_run_dir = made or not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # This run's alone until it stops (released in stop(), or with the process).
        self.run_lock = RunDirLock(self.run_dir, holder="ppomq train")
        earlier = earlier_env_id(self.run_dir)
        if earlier is not None and earlier != settings.env_id:
            self.run_lock.release()
            raise UsageError(
                f"{self.run_dir} holds a run of {earlier}, not {settings.env_id}: pass "
                f"--env-id {earlier} to go on with it, or another --run-dir for a new run"
            )
        if not settings.resume and (self.run_dir / FINISHED_FILE).exists():
            # The learner would move the finished run's dir aside, with our logs in it.
            self.run_lock.release()
            raise UsageError(
                f"{self.run_dir} holds a finished run; leave --run-dir out for a new run, "
                "or drop --no-resume to go on with it"
            )
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.redis: EmbeddedRedis | None = None
        self.children: list[Child] = []
        self.learner: Child | None = None
        # A learner group's other ranks (--learners): rank 0 is `learner`.
        self.members: list[Child] = []
        self._rank0_kill_at: float | None = None  # a group's rank 0, past its grace
        self.stopping = False
        self.start_time = time.monotonic()
        self.start_time_unix = time.time()  # files older than this are an earlier run's
        # Why supervise ended the run early (printed last, as a one-line error), if it did.
        self.failure: UserError | None = None
        # A second stop signal moves this up (see hurry); waits in stop() end by it.
        self.hurry_deadline = float("inf")
        self.hurry_noted = False
        self.learner_signalled = False
        self.learner_finished = False  # it exited 0: the run reached its end
        self.evaluation: EvaluationWatch | None = None  # the learner's, once it runs
        # Draws learning_curve.png in the learner's stead (ppomq.launch.learning_curve).
        self.painter: CurvePainter | None = None
        self._evaluated_at = float("-inf")  # when its final evaluation last said it runs
        self._health_at = 0.0
        self._redis_down_since: float | None = None
        self._health_client: redis.Redis | None = None
        self._steps_reached_at: float | None = None
        self._learner_down_s = 0.0  # learner restarts push the --duration-s deadline back

    def discard_if_unused(self) -> None:
        """After a failed start: remove the run dir this launch made if no service was
        started and nothing recorded there (its logs would hold nothing to read)."""
        self.run_lock.release()
        recorded = ("episodes.csv", "progress.csv", "summary.json", "checkpoints")
        if (
            self.made_run_dir
            and not self.children
            and not any((self.run_dir / name).exists() for name in recorded)
        ):
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def start(self) -> None:
        s = self.s
        # Phase by phase into the run's events and logs/launcher.log (ppomq.core.timeline):
        # where start-up and shutdown spend their time, for `ppomq train` runs that must
        # start like a tool. Every child appends its own events to the same file.
        events_file = s.events_file
        self.events = EventWriter(events_file, "launcher")
        self.evaluation = EvaluationWatch(Path(events_file) if events_file else None)
        self.timeline = Timeline(self.run_dir / "logs" / "launcher.log", self.events)
        self.timeline.mark("launcher start")
        if s.redis_url is not None:
            connect_redis(s.redis_url).close()  # one-line error now rather than in a child
        # The server's imports (seconds) run while Redis starts and the settings are written.
        zygote.start_server()
        if s.redis_url is None:
            # In the run dir, persisted: the versions outlive the run (`ppomq weights
            # --run-dir`), and a resumed run finds them, as it would in an external Redis.
            self.redis = EmbeddedRedis(
                data_dir=self.run_dir / REDIS_DIR, log_path=self.run_dir / "logs" / "redis.log"
            )
            redis_url = self.redis.url
            self.timeline.mark("redis ready")
        else:
            redis_url = s.redis_url
        # The user's binds as given; else free loopback ports (never a fixed public one).
        rollout_bind = s.rollout_bind or f"tcp://127.0.0.1:{free_port()}"
        weights_bind = s.weightserver_bind or f"tcp://127.0.0.1:{free_port()}"
        common = {"redis_url": redis_url, "run_dir": str(self.run_dir)}
        keys = run_keys(self.run_dir, s.actors) if s.curve else None
        server_curve = keys.server_settings() if keys else {}
        # One /metrics port per process when asked: learner PORT, weightserver PORT+1,
        # actor i PORT+2+i.
        port0 = s.metrics_port
        ws = subset(
            s,
            WeightserverSettings,
            redis_url=redis_url,
            events_file=events_file,
            bind=weights_bind,
            metrics_port=port0 + 1 if port0 else 0,
            **server_curve,
        )
        learner = subset(
            s,
            LearnerSettings,
            rollout_bind=rollout_bind,
            events_file=events_file,
            learning_curve=False,  # drawn here, see ppomq.launch.learning_curve
            **common,
            **server_curve,
        )
        # A learner group: rank r on its own loopback port, told its rank as torchrun would.
        binds = [rollout_bind] + [f"tcp://127.0.0.1:{free_port()}" for _ in range(s.learners - 1)]
        group_env = _group_env(s.learners)
        # Secrets redacted (the Redis password too): the run dir is shared, e.g. with TensorBoard.
        write_json_atomic(
            self.run_dir / "settings.json",
            settings_snapshot(
                s,
                redis_url=redis_url,
                rollout_bind=rollout_bind,
                weightserver_bind=weights_bind,
                rollout_port=port_of(rollout_bind),
                weights_port=port_of(weights_bind),
                redis_data_dir=REDIS_DIR if self.redis is not None else None,
                **server_curve,
            ),
        )
        logs = self.run_dir / "logs"
        self.children.append(
            Child("weightserver", ["weightserver"], child_env(ws), logs / "weightserver.log")
        )
        for rank, bind in enumerate(binds):
            name = "learner" if rank == 0 else f"learner-{rank}"
            # A group's rank says where its actors connect (rank 0 publishes every rank's).
            own = {"rollout_advertise": connect_addr(bind)} if s.learners > 1 else {}
            settings = learner.model_copy(update={"rollout_bind": bind, **own})
            env = child_env(settings) | {k: str(v) for k, v in group_env(rank).items()}
            child = Child(name, ["learner"], env, logs / f"{name}.log")
            if rank == 0:
                self.learner = child
            else:
                self.members.append(child)
            self.children.append(child)
        for i in range(s.actors):
            actor = subset(
                s,
                ActorSettings,
                actor_index=i,
                events_file=events_file,
                metrics_port=port0 + 2 + i if port0 else 0,
                learner_addr=connect_addr(rollout_bind),
                weightserver_addr=connect_addr(weights_bind),
                **(keys.actor_settings(i) if keys else {}),
            )
            self.children.append(
                Child(f"actor-{i}", ["actor"], child_env(actor), logs / f"actor-{i}.log")
            )
        self.redis_url = redis_url
        for i, child in enumerate(self.children):
            child.start()
            if i == 0:  # the first fork waits for the server's imports: now it is ready
                self.timeline.mark("zygote ready")
        self.timeline.mark("children forked")
        self.timeline.watch_child("learner exited", self.learner)
        if s.learning_curve:  # after the forks: matplotlib loads while the run trains
            self.painter = CurvePainter().start()

    def supervise(self, progress: Any = None) -> int:
        """Watch the children and Redis until the learner finishes; restart what crashes.

        Returns the exit code for the run: the learner's 0 when it finished (or the launcher's
        own deadline passed), non-zero with `self.failure` set when the run cannot go on."""
        assert self.learner is not None
        while True:
            now = time.monotonic()
            for child in self.children:
                code = self._watch(child, now)
                if code is not None:
                    return code
            self._kill_rank0_if_due(now)
            code = self._watch_redis(now)
            if code is not None:
                return code
            code = self._watch_evaluation(now)
            if code is not None:
                return code
            if self._past_deadline(now):
                return 0
            if progress is not None:
                progress()
            self._sleep_unless_learner_exits(SUPERVISE_TICK_S)

    def _sleep_unless_learner_exits(self, timeout: float) -> None:
        """Sleep one tick, but wake the moment the learner exits: the end of a run is
        usually the learner finishing, and every tick slept past it is time to the prompt."""
        proc = self.learner.proc if self.learner is not None else None
        if proc is None or proc.exitcode is not None:
            time.sleep(timeout)
            return
        multiprocessing.connection.wait([proc.sentinel], timeout=timeout)

    def _watch(self, child: Child, now: float) -> int | None:
        """Restart `child` if it died (after its backoff); an exit code ends the run."""
        if child.restart_at is not None:
            if now >= child.restart_at:
                child.restarts += 1
                if child is self.learner:
                    self._learner_down_s += now - child.crashes[-1]
                    self._rank0_kill_at = None  # a new rank 0, in a new group
                child.start()
            return None
        code = child.poll()
        if code is None:
            if child.failures and now - child.started_at >= HEALTHY_S:
                child.failures = 0  # healthy again: its next crash restarts it quickly
            return None
        if child.retired:
            return None
        what = exit_text(code)
        if child in self.members and code == 0:
            child.retired = True  # its group's run finished; rank 0 says so for the run
            return None
        if child is self.learner and self.evaluation is not None:
            self.evaluation.reset()  # a learner restarted after a crash evaluates anew
        if child is self.learner and code == 0:
            self.learner_finished = True
            return 0  # finished: total steps, duration or target return reached
        if code == 0:
            # An actor or the weightserver exits 0 by itself when the run is marked
            # finished, at about the time the learner exits: not a crash, nothing to restart.
            child.retired = True
            return None
        if code == 2:
            # A usage error (a port taken, another run's checkpoint) would only repeat at
            # every restart: stop now, with the child's own one-line reason.
            reason = last_error_line(child.log_path) or f"{child.name} {what}"
            self.failure = error_line(f"{child.name}: {reason} (see {child.log_path})", 2)
            note(f"{child.name} {what} (a usage error); stopping the run...")
            return 2
        if code == StorageFullError.exit_code:
            # A full or read-only disk: a restart would fail the same way. The child's own
            # line names the file, if its log (on that disk) could take it.
            reason = last_error_line(child.log_path) or storage_text(self.run_dir)
            summary = self.run_dir / "summary.json"
            if not summary.exists() or summary.stat().st_mtime < self.start_time_unix:
                reason += "; summary.json could not be written"
            self.failure = StorageFullError(f"{child.name}: {reason}")
            note(f"{child.name} {what} (the disk is full or read-only); stopping the run...")
            return code
        if child.name.startswith("actor") and not self.s.restart_actors:
            child.retired = True
            note(f"{child.name} {what}; not restarting it (--no-restart-actors)")
            return None
        if child is self.learner or child in self.members:
            self._gang_stop(child, now)
        child.crashes.append(now)
        while now - child.crashes[0] > CRASH_WINDOW_S:
            child.crashes.popleft()
        if len(child.crashes) >= CRASH_LIMIT:
            span = now - child.crashes[0]
            self.failure = error_line(
                f"{child.name} crashed {len(child.crashes)} times in {span:.0f} s (last: "
                f"{what}); gave up restarting it and stopped the run; see {child.log_path}",
                1,
            )
            note(f"{child.name} keeps crashing; stopping the run...")
            return 1
        delay = CRASH_BACKOFF.compute(child.failures)
        child.failures += 1
        child.restart_at = now + delay
        note(
            f"{child.name} {what}; restarting in {delay:.1f} s "
            f"(restart {child.restarts + 1}; log {child.log_path})"
        )
        return None

    def _gang_stop(self, crashed: Child, now: float) -> None:
        """A learner group restarts together (torchrun's gang restart): the ranks still
        running belong to a group that lost one. The others hold no state and are killed
        now; rank 0 notices the loss by itself (at once for a dead rank, within
        --group-timeout-s for a stuck one) and exits writing what it may, so it is killed
        only if it has not by then. Each is restarted after its own backoff, and the new
        group resumes from rank 0's checkpoint."""
        if not self.members:
            return
        for member in self.members:
            if member is not crashed and member.poll() is None:
                assert member.proc is not None
                member.proc.kill()
        rank0 = self.learner
        if crashed is rank0:
            self._rank0_kill_at = None  # it left by itself
        elif rank0 is not None and rank0.poll() is None and self._rank0_kill_at is None:
            self._rank0_kill_at = now + self.s.group_timeout_s + GROUP_EXIT_GRACE_S

    def _kill_rank0_if_due(self, now: float) -> None:
        """Rank 0 of a group that lost a rank, still running past its grace (stuck)."""
        due = self._rank0_kill_at
        if due is None or now < due:
            return
        self._rank0_kill_at = None
        learner = self.learner
        if learner is not None and learner.poll() is None and learner.proc is not None:
            note("learner rank 0 did not leave its lost group in time; killing it")
            learner.proc.kill()

    def _watch_redis(self, now: float) -> int | None:
        """End the run (exit 4) when its Redis is gone: the embedded server exited, or an
        external one has not answered for REDIS_DOWN_S. Also notes --total-steps reached."""
        if self.redis is not None and self.redis.proc is not None:
            code = self.redis.proc.poll()
            if code is not None:
                self.failure = RedisUnavailableError(
                    f"the embedded redis-server {exit_text(code)}; the run cannot go on "
                    f"without it and was stopped; the learner's checkpoint is kept: run "
                    f"again with --run-dir {self.run_dir} to resume"
                )
                note(f"the embedded redis-server {exit_text(code)}; stopping the run...")
                return 4
        if now - self._health_at < 1.0:
            return None
        self._health_at = now
        from ppomq.core.store.keys import RunKeys

        try:
            if self._health_client is None:
                self._health_client = make_redis(self.redis_url, timeout_s=1.0)
            raw = self._health_client.get(RunKeys(self.s.run_id).stats)
        except redis.RedisError as exc:
            if self._redis_down_since is None:
                self._redis_down_since = now
            elif now - self._redis_down_since >= REDIS_DOWN_S:
                self.failure = RedisUnavailableError(
                    f"Redis at {redact_url(self.redis_url)} has not answered for "
                    f"{now - self._redis_down_since:.0f} s ({first_line(exc)}), so the run "
                    f"was stopped; once Redis is back, run again with --run-dir "
                    f"{self.run_dir} to resume from the learner's checkpoint"
                )
                note("Redis is unreachable; stopping the run...")
                return 4
            return None
        self._redis_down_since = None
        try:
            steps = int(json.loads(raw)["env_steps"]) if raw else 0
        except (ValueError, KeyError, TypeError):
            steps = 0
        if self.s.total_steps and steps >= self.s.total_steps and self._steps_reached_at is None:
            self._steps_reached_at = now
        return None

    def _watch_evaluation(self, now: float) -> int | None:
        """The learner's final evaluation holds the deadlines back while it says it goes
        on (however long: Pong's take minutes); one silent for EVAL_SILENT_S is a hang,
        which ends the run (exit 1) with one line."""
        if self.evaluating():
            self._evaluated_at = now
            return None
        if self.evaluation is None or not self.evaluation.stalled():
            return None
        assert self.learner is not None
        self.failure = error_line(
            f"the learner's final evaluation said nothing for {EVAL_SILENT_S:.0f} s (it "
            f"hangs), so the run was stopped; see {self.learner.log_path}",
            1,
        )
        note("the learner's final evaluation hangs; stopping the run...")
        return 1

    def _past_deadline(self, now: float) -> bool:
        """True when the learner should have ended the run DEADLINE_GRACE_S ago and has not
        (stuck waiting on something dead): the launcher stops it then, warm as ever. Its
        final evaluation is no such wait: the grace counts from its last word."""
        s = self.s
        if s.duration_s:
            due = self.start_time + s.duration_s + self._learner_down_s
            if now >= max(due, self._evaluated_at) + DEADLINE_GRACE_S:
                note(f"--duration-s {s.duration_s:g} passed and the learner did not stop; stopping")
                return True
        reached = self._steps_reached_at
        if reached is not None and now - max(reached, self._evaluated_at) >= DEADLINE_GRACE_S:
            note(f"--total-steps {s.total_steps} reached and the learner did not stop; stopping")
            return True
        return False


def _group_env(world_size: int) -> Any:
    """torchrun's environment for rank r of a local learner group (none for one learner):
    the rendezvous on a free loopback port."""
    if world_size == 1:
        return lambda _rank: {}
    master_port = free_port()

    def env(rank: int) -> dict[str, Any]:
        return {"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": 0,
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master_port}  # fmt: skip

    return env
