"""`ppomq train`: Redis, a weightserver, a learner and K actors as real local processes.

The launcher only starts, watches and stops processes; every piece is the same service a
container would run, configured through the same `PPOMQ_*` variables. The Python children
are forked from one preloading server (ppomq.zygote), so torch & co. are imported once and
shared; Redis is a plain subprocess. Children log to run_dir/logs/; the terminal shows one
progress line read from the learner's Redis status.
"""

from __future__ import annotations

import atexit
import gc
import json
import multiprocessing.connection
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerProcess
from pathlib import Path
from typing import Any

import redis
from redis.backoff import ExponentialBackoff

from . import zygote
from .embedded_redis import EmbeddedRedis, free_port
from .envs import spaces_of
from .errors import RedisUnavailableError, UsageError, UserError
from .redis_util import connect_redis, make_redis, redact_url
from .rundir import FINISHED_FILE, REDIS_DIR
from .settings import (
    ActorSettings,
    LearnerSettings,
    TrainSettings,
    WeightserverSettings,
    settings_env,
    settings_snapshot,
)
from .timeline import Timeline

STOP_GRACE_S = 20.0
# A second Ctrl-C/SIGTERM: the learner gets its second signal (a fast stop that still
# writes the checkpoint and summary) and every wait is cut to this; a third: kill now.
HURRY_GRACE_S = 15.0

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


class _Terminated(Exception):
    """SIGTERM to `ppomq train`: stop like Ctrl-C does."""


@dataclass
class Child:
    """One supervised process and how to start it again: `ppomq ARGV` with `env`, forked
    from the preloading server (ppomq.zygote), logging to `log_path`."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: ForkServerProcess | None = field(default=None, repr=False)
    restarts: int = 0
    started_at: float = 0.0
    # Crash bookkeeping for supervise: when the pending restart is due, consecutive crashes
    # (the backoff exponent) and recent crash times (the give-up window).
    restart_at: float | None = None
    failures: int = 0
    crashes: deque[float] = field(default_factory=deque, repr=False)
    retired: bool = False  # exited and deliberately not restarted (--no-restart-actors)

    def start(self) -> None:
        self.restart_at = None
        self.started_at = time.monotonic()
        self.proc = zygote.fork(self.name, self.argv, self.env, self.log_path)

    def poll(self) -> int | None:
        """Exit code (negative: killed by that signal), None while running."""
        return None if self.proc is None else self.proc.exitcode

    def terminate(self) -> None:
        if self.proc is not None and self.proc.exitcode is None:
            self.proc.terminate()

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        self.proc.join(max(timeout, 0.01))
        if self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join()
        return self.proc.exitcode


def _subset(settings: TrainSettings, cls: type, **overrides: Any) -> Any:
    values = {k: v for k, v in settings.model_dump().items() if k in cls.model_fields}
    values.update(overrides)
    return cls.model_validate(values)


def _child_env(service_settings: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    env.update(settings_env(service_settings))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def connect_addr(bind: str) -> str:
    """Where a local peer connects to reach a socket bound at `bind`: a wildcard host
    (`*`, 0.0.0.0, ::) is not an address to connect to, so loopback stands in for it."""
    if not bind.startswith("tcp://"):
        return bind  # ipc://, inproc://: the same name on both ends
    host, _, port = bind[6:].rpartition(":")
    if host in ("*", "0.0.0.0", ""):
        return f"tcp://127.0.0.1:{port}"
    if host in ("[::]", "::", "[*]"):
        return f"tcp://[::1]:{port}"
    return bind


def _port_of(bind: str) -> int | None:
    """The TCP port of an endpoint (settings.json's rollout_port/weights_port), else None."""
    port = bind.rpartition(":")[2]
    return int(port) if bind.startswith("tcp://") and port.isdigit() else None


def default_run_dir(run_id: str) -> str:
    return f"runs/{run_id}-{time.strftime('%Y%m%d-%H%M%S')}"


class Launcher:
    """Owns every child process of a local run."""

    def __init__(self, settings: TrainSettings) -> None:
        # Fail in one line before starting anything: an unknown env, a missing optional
        # dependency (MuJoCo), observations ppomq cannot train on.
        spaces_of(settings.env_id)
        if not settings.run_dir:
            settings = settings.model_copy(update={"run_dir": default_run_dir(settings.run_id)})
        self.s = settings
        self.run_dir = Path(settings.run_dir)
        if not settings.resume and (self.run_dir / FINISHED_FILE).exists():
            # The learner would move the finished run's dir aside, with our logs in it.
            raise UsageError(
                f"{self.run_dir} holds a finished run; leave --run-dir out for a new run, "
                "or drop --no-resume to go on with it"
            )
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.redis: EmbeddedRedis | None = None
        self.children: list[Child] = []
        self.learner: Child | None = None
        self.stopping = False
        self.start_time = time.monotonic()
        # Why supervise ended the run early (printed last, as a one-line error), if it did.
        self.failure: UserError | None = None
        # A second stop signal moves this up (see hurry); waits in stop() end by it.
        self.hurry_deadline = float("inf")
        self.hurry_noted = False
        self.learner_signalled = False
        self._health_at = 0.0
        self._redis_down_since: float | None = None
        self._health_client: redis.Redis | None = None
        self._steps_reached_at: float | None = None
        self._learner_down_s = 0.0  # learner restarts push the --duration-s deadline back

    def start(self) -> None:
        s = self.s
        # Phase by phase into logs/launcher.log (ppomq.timeline): where start-up and
        # shutdown spend their time, for `ppomq train` runs that must start like a tool.
        self.timeline = Timeline(self.run_dir / "logs" / "launcher.log")
        self.timeline.mark("launcher start")
        if s.redis_url is not None:
            connect_redis(s.redis_url).close()  # one-line error now rather than in a child
        # The server's imports (~2 s) run while Redis starts and the settings are written.
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
        # One /metrics port per process when asked: learner PORT, weightserver PORT+1,
        # actor i PORT+2+i.
        port0 = s.metrics_port
        ws = _subset(
            s,
            WeightserverSettings,
            redis_url=redis_url,
            bind=weights_bind,
            metrics_port=port0 + 1 if port0 else 0,
        )
        learner = _subset(s, LearnerSettings, rollout_bind=rollout_bind, **common)
        # Secrets redacted (the Redis password too): the run dir is shared, e.g. with TensorBoard.
        (self.run_dir / "settings.json").write_text(
            json.dumps(
                settings_snapshot(
                    s,
                    redis_url=redis_url,
                    rollout_bind=rollout_bind,
                    weightserver_bind=weights_bind,
                    rollout_port=_port_of(rollout_bind),
                    weights_port=_port_of(weights_bind),
                    redis_data_dir=REDIS_DIR if self.redis is not None else None,
                ),
                indent=2,
            )
            + "\n"
        )
        logs = self.run_dir / "logs"
        self.children.append(
            Child("weightserver", ["weightserver"], _child_env(ws), logs / "weightserver.log")
        )
        self.learner = Child("learner", ["learner"], _child_env(learner), logs / "learner.log")
        self.children.append(self.learner)
        for i in range(s.actors):
            actor = _subset(
                s,
                ActorSettings,
                actor_index=i,
                metrics_port=port0 + 2 + i if port0 else 0,
                learner_addr=connect_addr(rollout_bind),
                weightserver_addr=connect_addr(weights_bind),
            )
            self.children.append(
                Child(f"actor-{i}", ["actor"], _child_env(actor), logs / f"actor-{i}.log")
            )
        self.redis_url = redis_url
        for i, child in enumerate(self.children):
            child.start()
            if i == 0:  # the first fork waits for the server's imports: now it is ready
                self.timeline.mark("zygote ready")
        self.timeline.mark("children forked")
        self.timeline.watch_child("learner exited", self.learner)

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
            code = self._watch_redis(now)
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
                child.start()
            return None
        code = child.poll()
        if code is None:
            if child.failures and now - child.started_at >= HEALTHY_S:
                child.failures = 0  # healthy again: its next crash restarts it quickly
            return None
        if child.retired:
            return None
        what = _exit_text(code)
        if child is self.learner and code == 0:
            return 0  # finished: total steps, duration or target return reached
        if code == 0:
            # An actor or the weightserver exits 0 by itself when the run is marked
            # finished, at about the time the learner exits: not a crash, nothing to restart.
            child.retired = True
            return None
        if code == 2:
            # A usage error (a port taken, another run's checkpoint) would only repeat at
            # every restart: stop now, with the child's own one-line reason.
            reason = _last_error_line(child.log_path) or f"{child.name} {what}"
            self.failure = _error(f"{child.name}: {reason} (see {child.log_path})", 2)
            _note(f"{child.name} {what} (a usage error); stopping the run...")
            return 2
        if child.name.startswith("actor") and not self.s.restart_actors:
            child.retired = True
            _note(f"{child.name} {what}; not restarting it (--no-restart-actors)")
            return None
        child.crashes.append(now)
        while now - child.crashes[0] > CRASH_WINDOW_S:
            child.crashes.popleft()
        if len(child.crashes) >= CRASH_LIMIT:
            span = now - child.crashes[0]
            self.failure = _error(
                f"{child.name} crashed {len(child.crashes)} times in {span:.0f} s (last: "
                f"{what}); gave up restarting it and stopped the run; see {child.log_path}",
                1,
            )
            _note(f"{child.name} keeps crashing; stopping the run...")
            return 1
        delay = CRASH_BACKOFF.compute(child.failures)
        child.failures += 1
        child.restart_at = now + delay
        _note(
            f"{child.name} {what}; restarting in {delay:.1f} s "
            f"(restart {child.restarts + 1}; log {child.log_path})"
        )
        return None

    def _watch_redis(self, now: float) -> int | None:
        """End the run (exit 4) when its Redis is gone: the embedded server exited, or an
        external one has not answered for REDIS_DOWN_S. Also notes --total-steps reached."""
        if self.redis is not None and self.redis.proc is not None:
            code = self.redis.proc.poll()
            if code is not None:
                self.failure = RedisUnavailableError(
                    f"the embedded redis-server {_exit_text(code)}; the run cannot go on "
                    f"without it and was stopped; the learner's checkpoint is kept: run "
                    f"again with --run-dir {self.run_dir} to resume"
                )
                _note(f"the embedded redis-server {_exit_text(code)}; stopping the run...")
                return 4
        if now - self._health_at < 1.0:
            return None
        self._health_at = now
        from .weightserver.keys import RunKeys

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
                    f"{now - self._redis_down_since:.0f} s ({_first_line(exc)}), so the run "
                    f"was stopped; once Redis is back, run again with --run-dir "
                    f"{self.run_dir} to resume from the learner's checkpoint"
                )
                _note("Redis is unreachable; stopping the run...")
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

    def _past_deadline(self, now: float) -> bool:
        """True when the learner should have ended the run DEADLINE_GRACE_S ago and has not
        (stuck waiting on something dead): the launcher stops it then, warm as ever."""
        s = self.s
        if s.duration_s:
            due = self.start_time + s.duration_s + self._learner_down_s + DEADLINE_GRACE_S
            if now >= due:
                _note(
                    f"--duration-s {s.duration_s:g} passed and the learner did not stop; stopping"
                )
                return True
        if self._steps_reached_at is not None and now - self._steps_reached_at >= DEADLINE_GRACE_S:
            _note(f"--total-steps {s.total_steps} reached and the learner did not stop; stopping")
            return True
        return False

    def hurry(self, *, now: bool = False) -> None:
        """A second stop signal: the learner gets its second SIGTERM (a fast stop that still
        writes its checkpoint and summary) and stop()'s waits end within HURRY_GRACE_S; a
        third (`now`): they end at once and what is left is killed. Signal-handler safe."""
        self.hurry_deadline = min(
            self.hurry_deadline, time.monotonic() + (0.0 if now else HURRY_GRACE_S)
        )
        if self.learner is not None and self.learner_signalled:
            self.learner.terminate()

    def _wait(self, child: Child, timeout: float) -> None:
        """child.wait(timeout), cut short by hurry(); what is still running then is killed."""
        end = time.monotonic() + timeout
        while child.proc is not None and child.proc.exitcode is None:
            if self.hurry_deadline < float("inf") and not self.hurry_noted:
                self.hurry_noted = True  # printed here, not in the signal handler
                _note("stopping faster (a third Ctrl-C kills what is left)...")
            left = min(end, self.hurry_deadline) - time.monotonic()
            if left <= 0:
                break
            child.proc.join(min(left, 0.1))
        child.wait(0)

    def stop(self) -> None:
        """Learner first (warm stop: it finishes the update, checkpoints, writes the
        summary), then the actors and the weightserver, then Redis."""
        self.stopping = True
        timeline: Timeline | None = getattr(self, "timeline", None)
        mark = timeline.mark if timeline is not None else (lambda _phase: None)
        mark("stop")
        if self.learner is not None:
            self.learner.terminate()
            self.learner_signalled = True
            if self.hurry_deadline < float("inf"):
                self.learner.terminate()  # the second Ctrl-C came before the first reached it
            self._wait(self.learner, STOP_GRACE_S + 60)  # the final evaluation runs in it
            mark("learner exited")
        for child in self.children:
            child.terminate()
            if timeline is not None:  # each exit marked as it happens: who holds the stop up
                timeline.watch_exit(f"{child.name} exited", child.proc)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            self._wait(child, deadline - time.monotonic())
        mark("children exited")
        zygote.stop_server()
        mark("zygote stopped")
        if self.redis is not None:
            self.redis.close()
            mark("redis stopped")
        if timeline is not None:
            timeline.finish(self.run_dir)
        # At exit Python's last garbage collections walk every object this process holds
        # (pydantic, gymnasium, numpy, redis...): ~0.1 s of `ppomq train`'s ~0.35 s from the
        # last update to the prompt. Frozen, they are skipped. At exit only, so a Launcher
        # used inside another program changes nothing there.
        atexit.register(gc.freeze)


def _exit_text(code: int) -> str:
    """'exited with 1', 'was killed by SIGKILL' (multiprocessing: minus the signal)."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def _last_error_line(log_path: Path) -> str | None:
    """The `ppomq: error: ...` line a service printed last, without the prefix."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 8192))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return None
    lines = [ln for ln in tail.splitlines() if ln.startswith("ppomq: error: ")]
    return lines[-1].removeprefix("ppomq: error: ") if lines else None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _error(text: str, code: int) -> UserError:
    err = UserError(text)
    err.exit_code = code
    return err


def _note(text: str) -> None:
    print(f"\r\033[K{text}" if sys.stdout.isatty() else text, flush=True)


class Progress:
    """One live line: steps, SPS, return, version, rejects (read from Redis status)."""

    def __init__(self, launcher: Launcher) -> None:
        from .weightserver.keys import RunKeys

        self.launcher = launcher
        self.redis = connect_redis(launcher.redis_url)
        self.key = RunKeys(launcher.s.run_id).stats
        self.tty = sys.stdout.isatty()
        self.last = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last < (1.0 if self.tty else 10.0):
            return
        self.last = now
        try:
            raw = self.redis.get(self.key)
        except Exception:
            return
        if not raw:
            return
        st = json.loads(raw)
        ret = st.get("mean_return_20")
        shown = "n/a" if ret is None else f"{ret:.1f}"
        rejects = sum(st.get("rejects", {}).values())
        line = (
            f"steps {st['env_steps']:>8,}  sps {st['sps']:>7,.0f}  "
            f"return {shown:>6}  "
            f"version {st['version']:>5}  rejects {rejects}  "
            f"[{now - self.launcher.start_time:5.1f}s]"
        )
        if self.tty:
            print("\r\033[K" + line, end="", flush=True)
        else:
            print(line, flush=True)


class _StopSignals:
    """Ctrl-C and SIGTERM for `ppomq train`: the first raises in the main thread (supervise
    ends, stop() runs: the warm stop); each later one, or any once stop() has begun, only
    hurries that stop (Launcher.hurry), so the cleanup itself is never cut short: children
    stopped, fork server stopped, Redis stopped (its data flushed to the run dir)."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.count = 0

    def install(self) -> _StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: Any) -> None:
        self.count += 1
        if self.count == 1 and not self.launcher.stopping:
            raise KeyboardInterrupt if signum == signal.SIGINT else _Terminated
        self.launcher.hurry(now=self.count >= 3)


def run_train(settings: TrainSettings) -> int:
    if settings.curve_server_cert or settings.curve_allowed_dir:
        raise UsageError(
            "CURVE (curve_server_cert / curve_allowed_dir) is not wired into `ppomq train` "
            "yet: a local run stays on loopback; run `ppomq learner/weightserver/actor` for it"
        )
    launcher = Launcher(settings)
    print(
        f"ppomq train: {settings.env_id}, {settings.mode} mode, {settings.actors} actor(s); "
        f"run dir {launcher.run_dir}",
        flush=True,
    )
    interrupted = False
    code = 1
    _StopSignals(launcher).install()
    try:
        launcher.start()
        progress = Progress(launcher) if settings.progress else None
        code = launcher.supervise(progress)
    except (KeyboardInterrupt, _Terminated):
        interrupted = True
        print("\nstopping (Ctrl-C again to stop faster)...", flush=True)
    finally:
        launcher.stop()
        # Everything is stopped: a late Ctrl-C (the second of two quick ones) has nothing
        # left to do. Ignored, not handled: the interpreter puts Python-handled signals back
        # to their defaults as it exits, and one landing then would end us with -SIGINT.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    if sys.stdout.isatty():
        print()
    summary_path = launcher.run_dir / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        print(_summary_text(summary, launcher.run_dir), flush=True)
    if launcher.failure is not None:
        raise launcher.failure
    if summary_path.exists():
        return 0 if interrupted else code
    raise UserError(
        f"the learner exited with {code} before writing a summary; "
        f"see {launcher.run_dir / 'logs' / 'learner.log'}"
    )


def _summary_text(s: dict[str, Any], run_dir: Path) -> str:
    solved = s.get("solved_at_env_steps")
    ev = s.get("final_eval_return")
    return "\n".join(
        [
            f"done: {s['total_env_steps']:,} env steps in {s['wall_seconds']:.1f} s "
            f"({s['sps']:,.0f} SPS), {s['versions']} versions",
            f"  solved at: {f'{solved:,} env steps' if solved is not None else 'not solved'}"
            f"  (threshold {s.get('solve_threshold')})",
            f"  final eval return: {ev if ev is None else round(ev, 1)}  "
            f"batches accepted {s['batches_accepted']}, rejected {s['batches_rejected']}",
            f"  run dir: {run_dir}",
        ]
    )
