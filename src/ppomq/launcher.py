"""`ppomq train`: Redis, a weightserver, a learner and K actors as real local processes.

The launcher only starts, watches and stops processes; every piece is the same service a
container would run, configured through the same `PPOMQ_*` variables. The Python children
are forked from one preloading server (ppomq.zygote), so torch & co. are imported once and
shared; Redis is a plain subprocess. Children log to run_dir/logs/; the terminal shows one
progress line read from the learner's Redis status.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerProcess
from pathlib import Path
from typing import Any

from . import zygote
from .embedded_redis import EmbeddedRedis, free_port
from .envs import check_env_id
from .errors import UserError
from .redis_util import connect_redis
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


class _Terminated(Exception):
    """SIGTERM to `ppomq train`: stop like Ctrl-C does."""


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise _Terminated


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

    def start(self) -> None:
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


def default_run_dir(run_id: str) -> str:
    return f"runs/{run_id}-{time.strftime('%Y%m%d-%H%M%S')}"


class Launcher:
    """Owns every child process of a local run."""

    def __init__(self, settings: TrainSettings) -> None:
        check_env_id(settings.env_id)  # fail in one line before starting anything
        if not settings.run_dir:
            settings = settings.model_copy(update={"run_dir": default_run_dir(settings.run_id)})
        self.s = settings
        self.run_dir = Path(settings.run_dir)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.redis: EmbeddedRedis | None = None
        self.children: list[Child] = []
        self.learner: Child | None = None
        self.stopping = False
        self.start_time = time.monotonic()

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
            self.redis = EmbeddedRedis()
            redis_url = self.redis.url
            self.timeline.mark("redis ready")
        else:
            redis_url = s.redis_url
        rollout_port, weights_port = free_port(), free_port()
        common = {"redis_url": redis_url, "run_dir": str(self.run_dir)}
        # One /metrics port per process when asked: learner PORT, weightserver PORT+1,
        # actor i PORT+2+i.
        port0 = s.metrics_port
        ws = _subset(
            s,
            WeightserverSettings,
            redis_url=redis_url,
            bind=f"tcp://127.0.0.1:{weights_port}",
            metrics_port=port0 + 1 if port0 else 0,
        )
        learner = _subset(
            s, LearnerSettings, rollout_bind=f"tcp://127.0.0.1:{rollout_port}", **common
        )
        (self.run_dir / "settings.json").write_text(
            json.dumps(
                {
                    **settings_snapshot(s),
                    "redis_url": redis_url,
                    "rollout_port": rollout_port,
                    "weights_port": weights_port,
                },
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
                learner_addr=f"tcp://127.0.0.1:{rollout_port}",
                weightserver_addr=f"tcp://127.0.0.1:{weights_port}",
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
        self.timeline.watch_exit("learner exited", self.learner.proc)

    def supervise(self, progress: Any = None) -> int:
        """Watch children until the learner exits; restart crashed actors."""
        assert self.learner is not None
        while True:
            code = self.learner.poll()
            if code is not None:
                return code
            for child in self.children:
                exited = child.poll()
                if child is self.learner or exited is None:
                    continue
                if child.name.startswith("actor") and self.s.restart_actors:
                    child.restarts += 1
                    _note(
                        f"{child.name} exited with {exited}; restarting (restart {child.restarts})"
                    )
                    child.start()
                elif child.name == "weightserver":
                    child.restarts += 1
                    _note(f"weightserver exited with {exited}; restarting")
                    child.start()
            if progress is not None:
                progress()
            time.sleep(0.5)

    def stop(self) -> None:
        """Learner first (warm stop: it finishes the update, checkpoints, writes the
        summary), then the actors and the weightserver, then Redis."""
        self.stopping = True
        timeline: Timeline | None = getattr(self, "timeline", None)
        mark = timeline.mark if timeline is not None else (lambda _phase: None)
        mark("stop")
        if self.learner is not None:
            self.learner.terminate()
            self.learner.wait(STOP_GRACE_S + 60)  # the final evaluation runs in the learner
            mark("learner exited")
        for child in self.children:
            child.terminate()
            if timeline is not None:  # each exit marked as it happens: who holds the stop up
                timeline.watch_exit(f"{child.name} exited", child.proc)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            child.wait(deadline - time.monotonic())
        mark("children exited")
        zygote.stop_server()
        mark("zygote stopped")
        if self.redis is not None:
            self.redis.close()
            mark("redis stopped")
        if timeline is not None:
            timeline.finish(self.run_dir)


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


def run_train(settings: TrainSettings) -> int:
    launcher = Launcher(settings)
    print(
        f"ppomq train: {settings.env_id}, {settings.mode} mode, {settings.actors} actor(s); "
        f"run dir {launcher.run_dir}",
        flush=True,
    )
    interrupted = False
    code = 1
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        launcher.start()
        progress = Progress(launcher) if settings.progress else None
        code = launcher.supervise(progress)
    except (KeyboardInterrupt, _Terminated):
        interrupted = True
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        print("\nstopping (Ctrl-C again to force)...", flush=True)
    finally:
        launcher.stop()
    if sys.stdout.isatty():
        print()
    summary_path = launcher.run_dir / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        print(_summary_text(summary, launcher.run_dir), flush=True)
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
