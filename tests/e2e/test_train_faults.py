"""`ppomq train` under faults: real processes, real sockets, its real embedded redis-server.

Each test starts `ppomq train`, breaks something the way it breaks in life (SIGKILL, a port
taken, Redis gone, two quick Ctrl-Cs), and checks that the run either carries on or ends
promptly with one line saying why, leaving no process and no temporary directory behind.
Timeouts here only bound liveness; they are generous because the machine may be shared.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from ppomq.core.rundir import REDIS_DIR, SOLVE_WINDOW, read_csv
from ppomq.core.store.keys import RunKeys
from tests.support import free_port, wait_until

from .cli import PPOMQ, SMALL
from .cli import clean_env as _env

pytestmark = pytest.mark.slow


class Run:
    """One `ppomq train` in its own session (a terminal's Ctrl-C reaches its group only)."""

    def __init__(self, run_dir: Path, *args: str) -> None:
        self.run_dir = run_dir
        self.proc = subprocess.Popen(
            [*PPOMQ, "train", "--run-dir", str(run_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
            start_new_session=True,
            # As from a terminal: a suite started in the background hands its children
            # SIGINT ignored, and then Ctrl-C rightly does nothing.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        self.seen: set[int] = set()  # every process of the run we have seen
        self.cfg: dict[str, Any] = {}

    def started(self) -> dict[str, Any]:
        """settings.json once the children run, and a Redis client on the run's Redis."""
        path = self.run_dir / "settings.json"
        wait_until(lambda: path.exists() and path.read_text().endswith("\n"), 90, "settings.json")
        self.cfg = json.loads(path.read_text())
        self.redis = redis.Redis.from_url(self.cfg["redis_url"], socket_timeout=2)
        self.keys = RunKeys(self.cfg["run_id"])
        return self.cfg

    def latest(self) -> int:
        raw = self.redis.get(self.keys.latest)
        return -1 if raw is None else int(raw)

    def tree(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen.update(k.pid for k in kids)
        return kids

    def named(self, name: str) -> psutil.Process | None:
        for p in self.tree():
            try:
                if p.name() == name:
                    return p
            except psutil.NoSuchProcess:
                pass
        return None

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def left_running(self) -> list[int]:
        return [pid for pid in self.seen if _running(pid)]

    def kill(self) -> None:
        """After a failed test: SIGTERM first (the launcher's own cleanup stops every
        process it started), SIGKILL if that does not end it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for pid in self.left_running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def train(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def _start(*args: str, name: str = "run") -> Run:
        run = Run(tmp_path / name, *args)
        runs.append(run)
        return run

    yield _start
    for run in runs:
        run.kill()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone(run: Run) -> None:
    """Nothing of the run outlives it (children exit with their parents: allow a moment)."""
    wait_until(lambda: not run.left_running(), 30, f"no process left of {sorted(run.seen)}")


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("ppomq: error:")]
    assert len(lines) == 1, err
    return lines[0]


def _solved_at(rows: list[dict[str, float]], threshold: float) -> int | None:
    """First env step where the mean of the last 20 episodes reached `threshold`."""
    for i in range(SOLVE_WINDOW - 1, len(rows)):
        window = rows[i - SOLVE_WINDOW + 1 : i + 1]
        if sum(r["return"] for r in window) / SOLVE_WINDOW >= threshold:
            return int(rows[i]["env_steps"])
    return None


def test_a_killed_learner_is_restarted_resumes_and_the_run_finishes(train):
    total = 40_000
    run = train("--actors", "2", "--total-steps", str(total), *SMALL)
    try:
        run.started()
        wait_until(lambda: run.latest() >= 10, 90, "version 10")
        learner = run.named("learner")
        assert learner is not None
        before = run.latest()
        learner.send_signal(signal.SIGKILL)
        # A new learner, resumed from run_dir/checkpoints/ckpt.pt, publishes above `before`.
        wait_until(
            lambda: (p := run.named("learner")) and p.pid != learner.pid, 90, "a new learner"
        )
        wait_until(lambda: run.latest() > before, 90, "a version above the killed learner's")
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 0, out + err
    assert "learner was killed by SIGKILL; restarting" in out
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= total
    assert summary["versions"] > before
    assert summary["learner_restarts"] == 1
    # The summary describes one run across both incarnations: its counters agree with the
    # run dir's CSVs (cut back to the checkpoint on resume) and with each other.
    rows = read_csv(run.run_dir / "episodes.csv")
    steps = [r["env_steps"] for r in rows]
    assert steps == sorted(steps), "episodes.csv holds a segment twice"
    assert summary["episodes"] == len(rows)
    assert summary["solved_at_env_steps"] == _solved_at(rows, summary["solve_threshold"])
    assert sum(summary["policy_age_histogram"].values()) == summary["batches_accepted"]
    judged = summary["batches_accepted"] + sum(summary["batches_rejected"].values())
    assert judged == summary["batches_produced"]  # no decode rejects in this run
    # The resumed clock starts where the checkpoint's stopped: after the start, within the run.
    assert 0 < summary["resumed_wall_s"] < summary["wall_seconds"], summary
    log = (run.run_dir / "logs" / "learner.log").read_text()
    assert log.count("forked from ppomq zygote") == 2
    assert "resum" in log
    _gone(run)


def test_a_child_that_keeps_crashing_stops_the_run_in_one_line_naming_its_log(train):
    run = train("--actors", "2", "--total-steps", "0", *SMALL)
    try:
        run.started()
        wait_until(lambda: run.latest() >= 1, 90, "version 1")
        killed: set[int] = set()

        def each_incarnation_killed_until_the_run_ends() -> bool:
            # Every incarnation of actor-0 dies at once; restarts come 0.5, 1, 2, 4 s later.
            actor = run.named("actor-0")
            if actor is not None and actor.pid not in killed:
                with contextlib.suppress(psutil.NoSuchProcess):
                    actor.send_signal(signal.SIGKILL)
                killed.add(actor.pid)
            assert len(killed) <= 5, "the launcher kept restarting it"
            return run.proc.poll() is not None

        wait_until(each_incarnation_killed_until_the_run_ends, 120, "the launcher to give up")
        code, out, err = run.finish(timeout=120)
    finally:
        run.kill()
    assert code == 1, out + err
    line = _one_error_line(err)
    log = run.run_dir / "logs" / "actor-0.log"
    assert "actor-0 crashed 5 times" in line and str(log) in line, line
    assert "was killed by SIGKILL" in line
    for delay in ("0.5", "1.0", "2.0", "4.0"):
        assert f"restarting in {delay} s" in out
    assert (run.run_dir / "summary.json").exists()  # the learner's warm stop still ran
    _gone(run)


def _metrics_ports_with_the_first_actors_taken() -> tuple[int, socket.socket]:
    """A --metrics-port P whose learner (P) and weightserver (P+1) ports are free while
    actor-0's (P+2) is held by a listening socket: actor-0 then fails at start. Below the
    kernel's ephemeral range, so that no outgoing connection (a test's Redis client) can be
    given P or P+1 between this probe and the learner's bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    lo, hi = (10_000, low - 3) if low > 10_100 else (1_024, 65_530)  # no room below: any
    for _ in range(50):
        port0 = random.randrange(lo, hi)
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", port0 + 2))
            holder.listen()
            for p in (port0, port0 + 1):
                with socket.socket() as probe:
                    probe.bind(("0.0.0.0", p))
            return port0, holder
        except OSError:
            holder.close()
    raise AssertionError("no free port triple found")


def test_a_childs_usage_error_stops_the_run_at_once_with_its_own_line(train):
    port0, holder = _metrics_ports_with_the_first_actors_taken()
    with holder:
        run = train("--actors", "1", "--total-steps", "0", "--metrics-port", str(port0), *SMALL)
        try:
            run.started()
            run.tree()
            code, out, err = run.finish(timeout=120)
        finally:
            run.kill()
    assert code == 2, out + err
    line = _one_error_line(err)
    # Restarting would only repeat it: one start, and the actor's own reason, naming the fix.
    assert line.startswith("ppomq: error: actor-0: cannot serve /metrics"), line
    assert "--metrics-port" in line and "actor-0.log" in line
    log = (run.run_dir / "logs" / "actor-0.log").read_text()
    assert log.count("forked from ppomq zygote") == 1
    _gone(run)


def test_the_embedded_redis_dying_ends_the_run_promptly_in_one_line(train):
    run = train("--actors", "2", "--total-steps", "0", *SMALL)
    try:
        run.started()
        wait_until(lambda: run.latest() >= 3, 90, "version 3")
        server = run.named("redis-server")
        assert server is not None
        workdir = Path(server.cwd())  # redis-server runs in its --dir: RUN_DIR/redis
        assert workdir == (run.run_dir / REDIS_DIR).resolve()
        server.send_signal(signal.SIGKILL)
        code, out, err = run.finish(timeout=120)  # promptly: a liveness bound
    finally:
        run.kill()
    assert code == 4, out + err
    line = _one_error_line(err)
    assert "redis-server was killed by SIGKILL" in line and "--run-dir" in line, line
    # Even SIGKILLed, Redis had appended what it stored to its file in the run dir.
    listed = subprocess.run(
        [*PPOMQ, "weights", "list", "--run-dir", str(run.run_dir), "--json"],
        capture_output=True, text=True, timeout=120, env=_env(),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["latest"] >= 3
    _gone(run)


def test_two_quick_ctrl_cs_still_clean_up_everything_and_write_the_summary(train):
    # A long final evaluation keeps the warm stop busy when the second Ctrl-C lands, so
    # that it is the fast stop (no evaluation) that has to write the summary.
    run = train("--actors", "2", "--total-steps", "0", *SMALL, "--eval-episodes", "2000")
    try:
        run.started()
        wait_until(lambda: run.latest() >= 3, 90, "version 3")
        run.tree()
        server = run.named("redis-server")
        assert server is not None
        workdir = Path(server.cwd())
        os.killpg(run.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
        # The warm stop writes the final weights, then evaluates them: the second Ctrl-C
        # lands in that evaluation.
        wait_until((run.run_dir / "final_weights.pt").exists, 90, "the warm stop's final weights")
        os.killpg(run.proc.pid, signal.SIGINT)
        code, out, err = run.finish(timeout=90)
    finally:
        run.kill()
    assert code == 128 + signal.SIGINT, out + err  # interrupted, not finished: 130
    assert "Traceback" not in out + err
    assert "stopping faster" in out
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["versions"] >= 3
    # Its data stays in the run dir, on purpose: what `ppomq weights --run-dir` reads.
    assert workdir == (run.run_dir / REDIS_DIR).resolve()
    _gone(run)


def _listening(proc: psutil.Process) -> set[int]:
    return {c.laddr.port for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def _connected_to(proc: psutil.Process) -> set[int]:
    return {c.raddr.port for c in proc.net_connections("tcp") if c.raddr}


def test_the_binds_given_are_the_ones_used_and_settings_json_is_what_children_got(train):
    rollout, weights = free_port(), free_port()
    # A bind beyond loopback needs CURVE: --curve makes the run's keys.
    run = train("--actors", "1", "--total-steps", "0", "--duration-s", "6", "--curve",
                "--rollout-bind", f"tcp://127.0.0.1:{rollout}",
                "--weightserver-bind", f"tcp://*:{weights}", "--gamma", "0.97", *SMALL)  # fmt: skip
    try:
        cfg = run.started()
        wait_until(lambda: run.latest() >= 1, 90, "version 1")
        learner, ws, actor = (run.named(n) for n in ("learner", "weightserver", "actor-0"))
        assert learner and ws and actor
        assert rollout in _listening(learner)
        assert weights in _listening(ws)
        assert {rollout, weights} <= _connected_to(actor)  # the actor was told both
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 0, out + err
    assert cfg["rollout_bind"] == f"tcp://127.0.0.1:{rollout}"
    assert cfg["weightserver_bind"] == f"tcp://*:{weights}"
    # Every learner setting recorded for the run is the one the learner ran with, but one:
    # ppomq train draws the learning curve itself and tells its learner not to.
    learner_cfg = json.loads((run.run_dir / "learner_settings.json").read_text())
    differ = {k: (cfg[k], v) for k, v in learner_cfg.items() if k in cfg and cfg[k] != v}
    assert differ == {"learning_curve": (True, False)}
    assert learner_cfg["gamma"] == 0.97
    keys = run.run_dir / "keys"
    assert learner_cfg["curve_server_cert"] == str(keys / "server.key_secret")
    assert oct((keys / "actors" / "actor-0.key_secret").stat().st_mode & 0o777) == "0o600"
    assert "(CURVE)" in (run.run_dir / "logs" / "actor-0.log").read_text()
    assert "CURVE, keys in RUN_DIR/keys" in out.splitlines()[0]
    _gone(run)


def test_duration_s_ends_the_run_even_when_the_learner_cannot(train):
    run = train("--actors", "1", "--total-steps", "0", "--duration-s", "6", *SMALL)
    try:
        run.started()
        learner = wait_until(lambda: run.named("learner"), 90, "the learner")
        log = run.run_dir / "logs" / "learner.log"
        # SIGSTOP once its signal handlers are in (the service shell's start line; a SIGTERM
        # before that would kill it without a summary), and long before its own 6 s are up
        # (waiting for a first version could outlast them on a loaded machine).
        wait_until(lambda: log.exists() and "learner started" in log.read_text(), 90, "its start")
        learner.suspend()
        assert run.proc.stdout is not None
        for line in run.proc.stdout:  # the launcher's own deadline: 6 s + grace
            if "--duration-s 6 passed" in line:
                break
        learner.resume()  # now it can take the warm stop the launcher sent
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 0, out + err
    assert (run.run_dir / "summary.json").exists()
    _gone(run)


@pytest.mark.parametrize("victim", ["actor-0", "weightserver"])
def test_a_killed_actor_or_weightserver_is_restarted_and_training_goes_on(train, victim):
    total = 30_000
    run = train("--actors", "2", "--total-steps", str(total), *SMALL)
    try:
        run.started()
        wait_until(lambda: run.latest() >= 5, 90, "version 5")
        proc = run.named(victim)
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        before = run.latest()
        wait_until(lambda: (p := run.named(victim)) and p.pid != proc.pid, 90, f"a new {victim}")
        wait_until(lambda: run.latest() > before + 2, 90, "training to go on")
        code, out, err = run.finish()
    finally:
        run.kill()
    assert code == 0, out + err
    assert f"{victim} was killed by SIGKILL; restarting in 0.5 s" in out
    log = (run.run_dir / "logs" / f"{victim}.log").read_text()
    assert log.count("forked from ppomq zygote") == 2
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= total
    if victim == "actor-0":
        # The restarted actor is a new actor: it reports under an id of its own.
        ids = [a for a in summary["actors_seen"] if a.startswith("a0-")]
        assert len(ids) == 2, summary["actors_seen"]
    _gone(run)


def test_an_external_redis_that_stays_away_ends_the_run_in_one_line(train, start_redis):
    server = start_redis()
    run = train("--actors", "1", "--total-steps", "0", "--redis-url", server.url, *SMALL)
    try:
        run.started()
        wait_until(lambda: run.latest() >= 3, 90, "version 3")
        run.tree()
        server.stop()  # and it stays away: REDIS_DOWN_S later the run stops
        code, out, err = run.finish(timeout=120)
    finally:
        run.kill()
        server.start()  # the session's other tests may use it; its fixture stops it
    assert code == 4, out + err
    line = _one_error_line(err)
    assert "has not answered for" in line and "--run-dir" in line, line
    assert (run.run_dir / "summary.json").exists()
    _gone(run)
