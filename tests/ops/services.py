"""The services as separately started processes on loopback, for fault tests.

Each service is `python -m ppomq.cli learner|weightserver|actor` with flags only (no
PPOMQ_* from the caller's environment), in its own session, logging to a file under the
test's tmp dir: what an operator runs on one machine without `ppomq train`. A `System` is
a context manager; leaving it stops every process it started, whatever happened.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis

from ppomq.core.store.keys import RunKeys
from tests.support import free_port, wait_until

PPOMQ = [sys.executable, "-m", "ppomq.cli"]
# The exit code of a service that SIGTERM stopped before its run's end (ppomq.core.signals):
# 128 + 15, as a shell reports it; only a finished run exits 0.
STOPPED_BY_SIGTERM = 128 + signal.SIGTERM
# Small and quick on two shared cores: 128 samples per batch, 4 epochs per update.
ROLLOUT = ["--num-envs", "4", "--num-steps", "32"]
LEARNER_SMALL = ["--update-epochs", "4", "--minibatch-size", "128", "--eval-episodes", "0"]


class Service:
    """One service process, its output in `log_path`."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
        with open(self.log_path, "ab") as log:  # append: a restarted service keeps one log
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self, tail: int = 3000) -> str:
        return self.full_log()[-tail:]

    def full_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: a crash, no warm stop."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM (a warm stop), then SIGKILL of its whole session after `timeout`."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        return proc.returncode


def assert_alive(services: Sequence[Service]) -> None:
    """Fail, with its log, if any of `services` has exited: what a wait needs is gone."""
    for service in services:
        if not service.alive():
            raise AssertionError(
                f"{service.name} exited ({service.proc and service.proc.returncode}):\n"
                + service.log()
            )


def logs_tail(services: Sequence[Service], tail: int = 1500) -> str:
    return "\n".join(f"--- {s.name}\n{s.log(tail)}" for s in services)


def while_up(
    *services: Service, about: Callable[[], object] | None = None
) -> dict[str, Callable[[], object]]:
    """`wait_until`'s check and context for a wait that needs `services` running:
    `wait_until(cond, 60, what, **while_up(learner))` fails at once if one exits, and shows
    their logs (after `about()`, if given) if the condition never comes."""

    def context() -> str:
        return (f"{about()}\n" if about is not None else "") + logs_tail(services)

    return {"check": lambda: assert_alive(services), "context": context}


class System:
    """A weightserver, a learner and actors on loopback, sharing one Redis and one run."""

    def __init__(
        self,
        root: Path,
        redis_url: str,
        *,
        run_id: str = "ops",
        actors: int = 2,
        learner_args: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.redis_url = redis_url
        self.run_id = run_id
        self.keys = RunKeys(run_id)
        self.run_dir = root / "run"
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.rollout_addr = f"tcp://127.0.0.1:{free_port()}"
        self.weights_addr = f"tcp://127.0.0.1:{free_port()}"
        common = ["--redis-url", redis_url, "--run-id", run_id]
        self.weightserver = Service(
            "weightserver",
            [*PPOMQ, "weightserver", *common, "--bind", self.weights_addr,
             "--poll-interval-s", "0.2"],
            self.logs / "weightserver.log",
        )  # fmt: skip
        self.learner = Service(
            "learner",
            [*PPOMQ, "learner", *common, *ROLLOUT, *LEARNER_SMALL, "--run-dir", str(self.run_dir),
             "--rollout-bind", self.rollout_addr, "--total-steps", "0",
             "--actors", str(actors), *learner_args],
            self.logs / "learner.log",
        )  # fmt: skip
        self.actors = [self._actor(i) for i in range(actors)]
        # Short socket timeouts: reads made while Redis is down fail fast instead of hanging.
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)

    def _actor(self, index: int) -> Service:
        return Service(
            f"actor-{index}",
            [*PPOMQ, "actor", "--run-id", self.run_id, *ROLLOUT, "--actor-index", str(index),
             "--learner-addr", self.rollout_addr, "--weightserver-addr", self.weights_addr],
            self.logs / f"actor-{index}.log",
        )  # fmt: skip

    @property
    def services(self) -> list[Service]:
        return [self.weightserver, self.learner, *self.actors]

    def start(self) -> None:
        for service in self.services:
            service.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for service in reversed(self.services):  # actors first, the weightserver last
            with contextlib.suppress(Exception):  # keep stopping the others
                service.stop(timeout=30)
        self.redis.close()

    # -- what the run reports in Redis ------------------------------------------------

    def latest(self) -> int | None:
        raw = self.redis.get(self.keys.latest)
        return None if raw is None else int(raw)

    def stats(self) -> dict[str, Any]:
        raw = self.redis.get(self.keys.stats)
        return {} if raw is None else json.loads(raw)

    def actor_entries(self) -> dict[str, dict[str, Any]]:
        return {k.decode(): json.loads(v) for k, v in self.redis.hgetall(self.keys.actors).items()}

    def versions(self) -> list[int]:
        return [int(v) for v in self.redis.zrange(self.keys.versions, 0, -1)]

    def progress(self) -> list[dict[str, float]]:
        """The learner's progress.csv: one row per update (version, wall_s, ...)."""
        path = self.run_dir / "progress.csv"
        if not path.exists():
            return []
        with open(path, newline="") as f:
            return [
                {k: float(v) for k, v in row.items() if k in ("version", "wall_s", "env_steps")}
                for row in csv.DictReader(f)
            ]

    # -- waiting --------------------------------------------------------------------

    def check_alive(self, *, except_: Sequence[Service] = ()) -> None:
        assert_alive([s for s in self.services if s not in except_])

    def wait_for(
        self,
        predicate: Callable[[], object],
        *,
        timeout_s: float,
        what: str,
        allow_down: Sequence[Service] = (),
    ) -> float:
        """Wait for `predicate` (Redis errors count as not yet) while every service stays
        up; returns the seconds it took, for the report lines only."""
        t0 = time.monotonic()
        wait_until(
            predicate,
            timeout_s,
            what,
            check=lambda: self.check_alive(except_=allow_down),
            not_yet=(redis.RedisError,),
            context=lambda: f"stats {self._stats_or_error()}\n{self.logs_tail()}",
        )
        return time.monotonic() - t0

    def _stats_or_error(self) -> object:
        try:
            return self.stats()
        except redis.RedisError as exc:
            return exc

    def logs_tail(self, tail: int = 1500) -> str:
        return logs_tail(self.services, tail)

    def exit_code(self, service: Service, timeout_s: float) -> int:
        """`service`'s exit code once it exits by itself; every log's tail if it does not."""
        assert service.proc is not None
        try:
            return service.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{service.name} still running after {timeout_s} s\n" + self.logs_tail()
            ) from None


def max_update_gap(rows: list[dict[str, float]], after_version: float) -> tuple[float, float]:
    """(longest time between consecutive updates from `after_version` on, version that
    ended it), from progress.csv's learner wall clock: how long training paused."""
    gap, at = 0.0, after_version
    for prev, row in itertools.pairwise(rows):
        if prev["version"] >= after_version and row["wall_s"] - prev["wall_s"] > gap:
            gap, at = row["wall_s"] - prev["wall_s"], row["version"]
    return gap, at
