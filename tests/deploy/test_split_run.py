"""benchmarks/deploy/split_run.py: one run spread over two network hosts as a user starts
it by hand (Redis, weightserver and learner on one host, the actors on another, CURVE
between their addresses) runs to its end by itself and leaves a run dir that reads as a
`ppomq train` run's, and no namespace behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.deploy import split_run
from benchmarks.deploy.netns import why_not_netns
from ppomq.core.events import read_events

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(180)]
REPO = Path(__file__).resolve().parents[2]
WORKLOAD = "--env-id CartPole-v1 --num-envs 4 --num-steps 32 --seed 3"


@pytest.fixture(autouse=True)
def _needs_netns() -> None:
    why = why_not_netns()
    if why:
        pytest.skip(why)


def test_a_run_over_two_hosts_ends_by_itself_with_the_actor_across_the_network(
    tmp_path: Path,
):
    run_dir = tmp_path / "run"
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.deploy.split_run", "--run-dir", str(run_dir),
         "--timeout-s", "120", "--learner-args",
         f"{WORKLOAD} --total-steps 2048 --eval-episodes 0 --no-learning-curve",
         "--actor-args", WORKLOAD],
        cwd=REPO, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= 2048
    events = [e["event"] for e in read_events(run_dir / "events.jsonl")]
    assert {"learner.ready", "actor.first_step", "actor.stop", "learner.stop"} <= set(events)
    actor_log = (run_dir / "hosts" / "actor-0.log").read_text()
    assert "-> tcp://10.231.0." in actor_log and "(CURVE)" in actor_log
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert after == before


def test_an_existing_run_dir_is_refused_in_one_line(tmp_path: Path, capsys):
    assert split_run.main(["--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err
