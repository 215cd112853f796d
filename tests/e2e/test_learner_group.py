"""A learner group end to end: `ppomq train --learners W`, and ranks started under
torchrun's environment, as real processes with a real redis-server, real ZeroMQ and gloo
sockets.

Each test starts a group, lets it train, sometimes breaks one rank the way ranks break
(SIGKILL, SIGSTOP), forges a batch at one rank or takes a rank's actors away, and checks
that the run ends by itself (exit 0) with every rank holding bit-identical parameters (the
"weights sha256" every rank logs at its end), the records adding up over the ranks, and the
versions only rising. Each bound is a named constant: a liveness deadline for a shared
2-core machine, never a timing claim. The pauses a lost rank causes are measured and
printed (run with -s to see them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import redis

from benchmarks.messages.factory import make_batch, whole_episodes
from ppomq.core.envs import rollout_spec_for
from ppomq.core.rundir import read_csv
from ppomq.core.store.keys import RunKeys
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import encode
from tests.ops.services import LEARNER_SMALL, ROLLOUT, Service, while_up
from tests.support import free_port, wait_until

from .cli import PPOMQ, clean_env

# Liveness bounds (seconds). A whole run, start to exit, that nothing breaks.
RUN_BOUND_S = 150
# From a rank lost to the group publishing a version above the last one before the loss.
RECOVER_BOUND_S = 90
# A run that lost a rank, from the loss to its exit.
FINISH_AFTER_LOSS_S = 180
# --group-timeout-s for the stopped-rank test, and what rank 0 may take beyond it to leave
# (its heartbeat polls every second; the machine is shared).
GROUP_TIMEOUT_S = 5
LEAVE_MARGIN_S = 10
# The launcher kills a stopped rank once rank 0 has left: within this of rank 0's exit.
STOPPED_KILLED_S = 10
STARTED_S = 90  # settings.json written, first versions published
TEST_TIMEOUT_S = 420

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]

SHA = re.compile(r"learner rank (\d+) done at version (\d+).*weights sha256 ([0-9a-f]{64})")
PID = re.compile(r"learner started \(pid (\d+)\)")
HERE = re.compile(r"rank \d+: v=\d+ group steps=\d+; here (\d+) batches accepted")
ENDPOINT = re.compile(r"receiving rollouts on (tcp://\S+)")


class Versions:
    """Redis's newest published version, polled in a thread: when each was first seen, and
    whether it ever went back."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client, self.key = client, key
        self.seen: list[tuple[float, int]] = []  # (monotonic time first seen, version)
        self.went_back: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            try:
                raw = self.client.get(self.key)
            except redis.RedisError:
                continue  # the run is ending: its Redis stops
            if raw is None:
                continue
            v = int(raw)
            if self.seen and v < self.seen[-1][1]:
                self.went_back.append((self.seen[-1][1], v))
            if not self.seen or v != self.seen[-1][1]:
                self.seen.append((time.monotonic(), v))

    def latest(self) -> int:
        return self.seen[-1][1] if self.seen else -1

    def pause_around(self, t: float, trained: set[int]) -> tuple[float, float, int, int]:
        """Around a loss at `t`: (seconds from the last version before it to the first
        after it, to the first after it that an update made (a row of progress.csv, not
        the version a resumed rank 0 publishes with the weights it resumed from), the last
        version before, the first trained one after)."""
        before = [(ts, v) for ts, v in self.seen if ts <= t]
        after = [(ts, v) for ts, v in self.seen if ts > t]
        assert before and after, self.seen
        first_trained = [(ts, v) for ts, v in after if v in trained]
        assert first_trained, (after, sorted(trained))
        t0 = before[-1][0]
        return after[0][0] - t0, first_trained[0][0] - t0, before[-1][1], first_trained[0][1]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class GroupRun:
    """One `ppomq train --learners W` in its own session, its output in files."""

    def __init__(self, tmp: Path, *args: str) -> None:
        tmp.mkdir()
        self.run_dir = tmp / "run"
        self.out_path, self.err_path = tmp / "stdout.txt", tmp / "stderr.txt"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [*PPOMQ, "train", "--run-dir", str(self.run_dir), "--no-progress", *args],
                stdout=out, stderr=err, env=clean_env(), start_new_session=True,
            )  # fmt: skip
        self.versions: Versions | None = None
        self.stopped: list[int] = []  # pids this test SIGSTOPped

    def check(self) -> None:
        assert self.proc.poll() is None, (
            f"ppomq train exited {self.proc.returncode}\n{self.output()}"
        )

    def output(self) -> str:
        return self.out_path.read_text() + self.err_path.read_text()

    def started(self) -> Versions:
        path = self.run_dir / "settings.json"
        wait_until(lambda: path.exists() and path.read_text().endswith("\n"), STARTED_S,
                   "settings.json", check=self.check)  # fmt: skip
        cfg = json.loads(path.read_text())
        client = redis.Redis.from_url(cfg["redis_url"], socket_timeout=2)
        self.versions = Versions(client, RunKeys(cfg["run_id"]).latest)
        return self.versions

    def wait_version(self, v: int, bound: float = STARTED_S) -> None:
        assert self.versions is not None
        wait_until(lambda: self.versions.latest() >= v, bound, f"version {v}",
                   check=self.check, context=self.output)  # fmt: skip

    def log(self, name: str) -> str:
        path = self.run_dir / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pid(self, name: str) -> int | None:
        """The pid the newest incarnation of learner `name` logged, if it is that learner."""
        found = PID.findall(self.log(name))
        if not found:
            return None
        pid = int(found[-1])
        try:
            cmdline = " ".join(psutil.Process(pid).cmdline())
        except psutil.NoSuchProcess:
            return None
        return pid if "learner" in cmdline else None

    def finish(self, bound: float) -> int:
        try:
            code = self.proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not end within {bound} s\n{self.output()}") from None
        if self.versions is not None:
            self.versions.stop()
        return code

    def summary(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "summary.json").read_text())

    def digests(self, world: int) -> list[tuple[int, int, str]]:
        """Each rank's last (rank, version, weights sha256) line."""
        out = []
        for r in range(world):
            found = SHA.findall(self.log("learner" if r == 0 else f"learner-{r}"))
            assert found, f"rank {r} logged no final digest:\n{self.log(f'learner-{r}')}"
            rank, version, digest = found[-1]
            out.append((int(rank), int(version), digest))
        return out

    def cleanup(self) -> None:
        for pid in self.stopped:  # a stopped process takes no SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.versions is not None:
            self.versions.stop()


@pytest.fixture
def group_run(tmp_path: Path) -> Iterator[Callable[..., GroupRun]]:
    runs: list[GroupRun] = []

    def _start(*args: str) -> GroupRun:
        run = GroupRun(tmp_path / f"g{len(runs)}", *args)
        runs.append(run)
        return run

    yield _start
    for run in runs:
        run.cleanup()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _assert_identical_at_the_end(run: GroupRun, world: int) -> list[tuple[int, int, str]]:
    ends = run.digests(world)
    assert [r for r, _, _ in ends] == list(range(world)), ends
    assert len({v for _, v, _ in ends}) == 1, f"ranks ended at different versions: {ends}"
    assert len({d for _, _, d in ends}) == 1, f"ranks' final parameters differ: {ends}"
    return ends


def _assert_versions_rise(run: GroupRun) -> list[int]:
    rows = read_csv(run.run_dir / "progress.csv")
    versions = [int(r["version"]) for r in rows]
    assert versions == sorted(set(versions)), f"progress.csv's versions go back: {versions}"
    assert run.versions is not None
    assert not run.versions.went_back, f"Redis's latest went back: {run.versions.went_back}"
    return versions


def _assert_ledger_adds_up(summary: dict[str, Any], actors: int) -> None:
    totals = summary["ledger"]["totals"]
    rows = summary["ledger"]["actors"]
    assert totals["accepted"] == sum(r["accepted"] for r in rows.values()), summary["ledger"]
    assert totals["accepted"] == summary["batches_accepted"], summary
    assert totals["received"] == sum(r["received"] for r in rows.values()), summary["ledger"]
    assert totals["actors_trained"] == actors, totals
    seen = summary["actors_seen"]
    assert sum(r["accepted"] for r in seen.values()) == summary["batches_accepted"], seen
    assert sum(r["env_steps"] for r in seen.values()) == summary["total_env_steps"], summary


# ---------------------------------------------------------------------- 1: a group trains

TOTAL_STEPS = 30_000


# W = 3 here: the other tests run groups of two (and tests/learner/test_group.py both).
@pytest.mark.parametrize("world", [3])
def test_a_group_trains_to_its_end_with_identical_parameters_on_every_rank(group_run, world):
    run = group_run("--learners", str(world), "--actors", "4",
                    "--total-steps", str(TOTAL_STEPS), "--eval-episodes", "2")  # fmt: skip
    run.started()
    code = run.finish(RUN_BOUND_S)
    assert code == 0, run.output()
    summary = run.summary()
    assert summary["learners"] == world
    assert summary["total_env_steps"] >= TOTAL_STEPS
    assert summary["learner_restarts"] == 0
    _assert_ledger_adds_up(summary, actors=4)
    # Actor i goes to rank i % W: every rank trained on batches of its own.
    for r in range(1, world):
        here = [int(n) for n in HERE.findall(run.log(f"learner-{r}"))]
        assert here and here[-1] > 0, run.log(f"learner-{r}")
    assert all(row["accepted"] > 0 for row in summary["actors_seen"].values()), summary
    rows = read_csv(run.run_dir / "progress.csv")
    assert "time/learner_allreduce" in rows[0], list(rows[0])
    assert all(row["time/learner_allreduce"] > 0 for row in rows), "an update without all-reduce"
    versions = _assert_versions_rise(run)
    ends = _assert_identical_at_the_end(run, world)
    assert ends[0][1] == versions[-1] == summary["versions"], (ends, versions[-1], summary)


# ---------------------------------------------------------------------- 2-4: a rank lost

LOSS_STEPS = 60_000
KILL_AT_VERSION = 5


def _lose_a_rank_and_finish(run: GroupRun, victim: str, sig: signal.Signals) -> dict[str, Any]:
    """Signal learner `victim` at KILL_AT_VERSION; wait for the group to publish above the
    last version before it and for the run's end. Returns what the test checks next."""
    versions = run.started()
    run.wait_version(KILL_AT_VERSION)
    pids = {name: run.pid(name) for name in ("learner", "learner-1")}
    assert None not in pids.values(), (pids, run.log("learner"), run.log("learner-1"))
    before = versions.latest()
    t_loss, t_loss_unix = time.monotonic(), time.time()
    os.kill(pids[victim], sig)  # type: ignore[arg-type]
    # Every rank gone and started again: a new pid for each, then a version above `before`.
    for name, old in pids.items():
        wait_until(lambda n=name, o=old: (p := run.pid(n)) is not None and p != o,
                   RECOVER_BOUND_S, f"a new {name}", check=run.check,
                   context=run.output)  # fmt: skip
    run.wait_version(before + 1, RECOVER_BOUND_S)
    code = run.finish(FINISH_AFTER_LOSS_S)
    return _measured(run, code, before, t_loss, t_loss_unix)


def _measured(
    run: GroupRun, code: int, before: int, t_loss: float, t_loss_unix: float
) -> dict[str, Any]:
    assert run.versions is not None
    trained = {int(r["version"]) for r in read_csv(run.run_dir / "progress.csv")}
    back, pause, last, first = run.versions.pause_around(t_loss, trained)
    return {"code": code, "before": before, "t_loss_unix": t_loss_unix, "back": back,
            "pause": pause, "last": last, "first": first}  # fmt: skip


def _ready_after(run: GroupRun, t_unix: float) -> float | None:
    """When rank 0's next incarnation said it was ready (events.jsonl), after `t_unix`."""
    for line in (run.run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "learner.ready" and event["t"] > t_unix:
            return float(event["t"])
    return None


def _report(what: str, run: GroupRun, got: dict[str, Any]) -> None:
    t_loss_unix = got["t_loss_unix"]
    ready = _ready_after(run, t_loss_unix)
    ready_s = "n/a" if ready is None else f"{ready - t_loss_unix:.2f} s"
    print(f"\n[{what}] pause {got['pause']:.2f} s from version {got['last']} (the last "
          f"before the loss) to {got['first']} (the first trained after it); a version "
          f"published again {got['back']:.2f} s after {got['last']}; rank 0 ready again "
          f"{ready_s} after the loss")  # fmt: skip


def _assert_resumed(run: GroupRun, got: dict[str, Any]) -> dict[str, Any]:
    assert got["code"] == 0, run.output()
    summary = run.summary()
    assert summary["total_env_steps"] >= LOSS_STEPS
    assert summary["learner_restarts"] >= 1, summary
    assert summary["versions"] > got["before"]
    assert "resum" in run.log("learner").split("learner started")[-1], run.log("learner")
    versions = _assert_versions_rise(run)
    assert got["first"] > got["last"], got
    _assert_ledger_adds_up(summary, actors=4)
    ends = _assert_identical_at_the_end(run, 2)
    assert ends[0][1] == versions[-1], (ends, versions[-1])
    return summary


def _loss_args(*extra: str) -> list[str]:
    return ["--learners", "2", "--actors", "4", "--total-steps", str(LOSS_STEPS),
            "--eval-episodes", "0", *extra]  # fmt: skip


def test_a_rank_killed_mid_run_the_group_restarts_from_rank_0s_checkpoint(group_run):
    run = group_run(*_loss_args())
    got = _lose_a_rank_and_finish(run, "learner-1", signal.SIGKILL)
    out = run.output()
    assert "learner-1 was killed by SIGKILL; restarting" in out, out
    # Rank 0 noticed by itself and left with exit 6, saying why.
    assert "learner exited with 6; restarting" in out, out
    assert "lost a rank" in run.log("learner"), run.log("learner")
    _assert_resumed(run, got)
    _report("rank 1 SIGKILL", run, got)


def test_a_rank_stopped_mid_run_never_hangs_the_group(group_run):
    run = group_run(*_loss_args("--group-timeout-s", str(GROUP_TIMEOUT_S)))
    versions = run.started()
    run.wait_version(KILL_AT_VERSION)
    stopped, rank0 = run.pid("learner-1"), run.pid("learner")
    assert stopped is not None and rank0 is not None
    before = versions.latest()
    t_loss, t_loss_unix = time.monotonic(), time.time()
    os.kill(stopped, signal.SIGSTOP)
    run.stopped.append(stopped)
    # Rank 0 notices the silent rank and leaves by itself: no hang in a collective.
    bound = GROUP_TIMEOUT_S + LEAVE_MARGIN_S
    wait_until(lambda: _gone(rank0), bound, "rank 0 leaving its lost group",
               check=run.check, context=run.output)  # fmt: skip
    left_s = time.monotonic() - t_loss
    wait_until(lambda: _gone(stopped), STOPPED_KILLED_S, "the launcher killing the stopped rank",
               check=run.check, context=run.output)  # fmt: skip
    run.wait_version(before + 1, RECOVER_BOUND_S)
    code = run.finish(FINISH_AFTER_LOSS_S)
    got = _measured(run, code, before, t_loss, t_loss_unix)
    out = run.output()
    assert "learner exited with 6; restarting" in out, out
    assert "learner-1 was killed by SIGKILL; restarting" in out, out
    lost = run.log("learner").split("learner started")[1]  # the first incarnation's log
    assert "lost a rank (rank 1" in lost, lost
    _assert_resumed(run, got)
    print(f"\n[rank 1 SIGSTOP, --group-timeout-s {GROUP_TIMEOUT_S}] rank 0 left {left_s:.2f} s "
          "after the stop")  # fmt: skip
    _report("rank 1 SIGSTOP", run, got)


TORCHRUN_KILL_AT = 20  # small updates here (128 samples a rank): a few seconds in


def test_separately_started_ranks_rank_0_killed_the_other_leaves_by_itself(redis_url, tmp_path):
    """Ranks started under torchrun's environment (as compose or Kubernetes start them),
    no launcher to stop them: rank 1 notices rank 0 (and its rendezvous store) gone and
    exits 6 by itself; started again, the group resumes above the last version; one
    rank's SIGTERM stops both after the same update, with the same parameters."""
    run_id, run_dir, master = "torchrun", tmp_path / "run", free_port()
    rollout = [f"tcp://127.0.0.1:{free_port()}" for _ in range(2)]
    weights = f"tcp://127.0.0.1:{free_port()}"
    common = ["--redis-url", redis_url, "--run-id", run_id]

    def rank(r: int) -> Service:
        env = ["env", f"RANK={r}", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", f"MASTER_PORT={master}"]
        return Service(f"rank{r}",
                       [*env, *PPOMQ, "learner", *common, *ROLLOUT, *LEARNER_SMALL,
                        "--run-dir", str(run_dir), "--rollout-bind", rollout[r],
                        "--total-steps", "0", "--actors", "2",
                        "--group-timeout-s", str(GROUP_TIMEOUT_S)],
                       tmp_path / f"rank{r}.log")  # fmt: skip

    ranks = [rank(0), rank(1)]
    others = [
        Service("weightserver", [*PPOMQ, "weightserver", *common, "--bind", weights,
                                 "--poll-interval-s", "0.2"], tmp_path / "ws.log"),
        *(Service(f"actor-{i}", [*PPOMQ, "actor", "--run-id", run_id, *ROLLOUT,
                                 "--actor-index", str(i), "--learner-addr", rollout[0],
                                 "--weightserver-addr", weights], tmp_path / f"actor-{i}.log")
          for i in range(2)),
    ]  # fmt: skip
    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    versions = Versions(client, RunKeys(run_id).latest)
    try:
        for service in [*ranks, *others]:
            service.start()
        up = while_up(*ranks, *others)
        wait_until(lambda: versions.latest() >= TORCHRUN_KILL_AT, STARTED_S,
                   f"version {TORCHRUN_KILL_AT}", **up)  # fmt: skip
        # Each actor reached its own rank (actor i -> rank i % 2).
        assert "(learner rank 1 of 2)" in others[2].full_log(), others[2].full_log()
        before, t_loss = versions.latest(), time.monotonic()
        ranks[0].kill()
        bound = GROUP_TIMEOUT_S + LEAVE_MARGIN_S
        try:
            code = ranks[1].proc.wait(timeout=bound)  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            raise AssertionError(f"rank 1 still runs {bound} s after rank 0 died:\n"
                                 + ranks[1].log()) from None  # fmt: skip
        left_s = time.monotonic() - t_loss
        assert code == 6, ranks[1].log()
        assert "lost a rank" in ranks[1].log(), ranks[1].log()
        for r in ranks:  # what compose's restart or a Job's does
            r.start()
        up = while_up(*ranks, *others)
        wait_until(lambda: versions.latest() > before + 3, RECOVER_BOUND_S,
                   f"versions trained after {before}", **up)  # fmt: skip
        assert "resum" in ranks[0].full_log().split("learner started")[-1], ranks[0].log()
        ranks[1].proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        codes = [r.proc.wait(timeout=RECOVER_BOUND_S) for r in ranks]  # type: ignore[union-attr]
    finally:
        versions.stop()
        for service in [*others, *ranks]:
            with contextlib.suppress(Exception):
                service.stop(timeout=30)
        client.close()
    assert codes == [128 + signal.SIGTERM] * 2, (codes, ranks[0].log(), ranks[1].log())
    assert not versions.went_back, versions.went_back
    back = [ts for ts, v in versions.seen if ts > t_loss]
    print(f"\n[torchrun ranks, rank 0 SIGKILL, --group-timeout-s {GROUP_TIMEOUT_S}] rank 1 "
          f"left {left_s:.2f} s after; the test restarted both; first version after the loss "
          f"{back[0] - t_loss:.2f} s after it")  # fmt: skip
    ends = []
    for r in ranks:
        found = SHA.findall(r.full_log())
        assert found, r.log()
        ends.append(found[-1])
    assert ends[0][1:] == ends[1][1:], f"the ranks ended apart: {ends}"


# ---------------------------------------------------------------------- 5: a forged batch

FORGE_STEPS = 60_000
FORGE_AT_VERSION = 5
REFUSED_S = 30  # the forgeries counted in the group's status (Redis), the run still going


def test_a_forged_batch_at_one_rank_changes_nothing_on_any_rank(group_run):
    run = group_run("--learners", "2", "--actors", "2", "--no-curve", "--run-id", "forged",
                    "--total-steps", str(FORGE_STEPS), "--eval-episodes", "0")  # fmt: skip
    versions = run.started()
    run.wait_version(FORGE_AT_VERSION)
    endpoint = ENDPOINT.findall(run.log("learner-1"))
    assert endpoint, run.log("learner-1")
    cfg = json.loads((run.run_dir / "settings.json").read_text())
    assert endpoint[-1] != cfg["rollout_bind"], "rank 1 shares rank 0's endpoint"
    spec = rollout_spec_for("CartPole-v1", run_id="forged", num_steps=32, num_envs=8,
                            max_bytes=1 << 24)  # fmt: skip
    rng = np.random.default_rng(0)

    def forged(actor_id: str, version: int, run_id: str = "forged") -> list:
        b = whole_episodes(make_batch(spec, rng, actor_id=actor_id, n=8), 1e6)
        b.run_id, b.policy_version = run_id, version
        return encode(b)

    now = versions.latest()
    sent = {
        "run_id": forged("forger-run", now, run_id="another-run"),  # another run's batch
        "future_version": forged("forger-future", now + 1000),  # a version not yet published
        "header_not_msgpack": [b"\xc1 not a rollout", b"\x00" * 64],  # garbage
    }
    with RolloutSender(endpoint[-1], linger_ms=2000) as forger:
        for frames in sent.values():
            assert forger.send(frames, timeout_ms=5000)
        assert forger.send(forged("forger-stale", 0), timeout_ms=5000)  # too old to train on
    client = redis.Redis.from_url(cfg["redis_url"], socket_timeout=2)
    stats_key = RunKeys("forged").stats

    def refused() -> bool:
        raw = client.get(stats_key)
        rejects = json.loads(raw).get("rejects", {}) if raw else {}
        return all(rejects.get(reason, 0) >= 1 for reason in sent)

    # Counted in the group's status while the run goes on: refused mid-run, by rank 1.
    wait_until(refused, REFUSED_S, f"rank 1's refusals {list(sent)} in the group's status",
               check=run.check, context=lambda: client.get(stats_key))  # fmt: skip
    client.close()
    code = run.finish(RUN_BOUND_S)
    assert code == 0, run.output()
    summary = run.summary()
    assert summary["learners"] == 2
    rejected = summary["batches_rejected"]
    for reason in sent:
        assert rejected.get(reason) == 1, rejected
    ledger = summary["ledger"]["actors"]
    assert ledger["forger-stale"]["stale"] == 1 and ledger["forger-stale"]["accepted"] == 0
    # Nothing forged was trained on or counted: only the two actors' batches and steps.
    honest = {a for a in summary["actors_seen"] if not a.startswith("forger")}
    assert set(summary["actors_seen"]) == honest and len(honest) == 2, summary["actors_seen"]
    _assert_ledger_adds_up(summary, actors=2)
    # The forged episodes' returns of 1e6 are in no record (CartPole's most is 500).
    returns = [row["return"] for row in read_csv(run.run_dir / "episodes.csv")]
    assert returns and max(returns) <= 500, max(returns)
    _assert_versions_rise(run)
    _assert_identical_at_the_end(run, 2)


# ---------------------------------------------------------------------- 6: no actors

ALONE_STEPS = 12_000
VANISH_STEPS = 40_000
VANISH_AT_VERSION = 4
AFTER_VANISH_VERSIONS = 10  # the group goes on this many versions with rank 1 actor-less


def test_a_rank_that_never_had_an_actor_takes_part(group_run):
    run = group_run("--learners", "2", "--actors", "1", "--total-steps", str(ALONE_STEPS),
                    "--eval-episodes", "0")  # fmt: skip
    run.started()
    code = run.finish(RUN_BOUND_S)
    assert code == 0, run.output()
    summary = run.summary()
    assert summary["total_env_steps"] >= ALONE_STEPS
    _assert_ledger_adds_up(summary, actors=1)
    here = [int(n) for n in HERE.findall(run.log("learner-1"))]
    assert here and all(n == 0 for n in here), run.log("learner-1")
    _assert_versions_rise(run)
    _assert_identical_at_the_end(run, 2)


def test_a_rank_whose_actors_vanish_still_takes_part(group_run):
    run = group_run("--learners", "2", "--actors", "2", "--no-restart-actors",
                    "--total-steps", str(VANISH_STEPS), "--eval-episodes", "0")  # fmt: skip
    versions = run.started()
    run.wait_version(VANISH_AT_VERSION)
    actor_log = run.log("actor-1")
    assert "(learner rank 1 of 2)" in actor_log, actor_log
    pid = int(re.findall(r"actor started \(pid (\d+)\)", actor_log)[-1])
    assert "actor" in " ".join(psutil.Process(pid).cmdline())
    os.kill(pid, signal.SIGKILL)
    at = versions.latest()
    run.wait_version(at + AFTER_VANISH_VERSIONS, RECOVER_BOUND_S)
    code = run.finish(RUN_BOUND_S)
    assert code == 0, run.output()
    assert "actor-1 was killed by SIGKILL; not restarting it" in run.output()
    summary = run.summary()
    assert summary["total_env_steps"] >= VANISH_STEPS
    assert summary["learner_restarts"] == 0
    _assert_versions_rise(run)
    _assert_identical_at_the_end(run, 2)
