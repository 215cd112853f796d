"""`python -m benchmarks.run_ahead` end to end on two tiny real runs: the arms' flags reach
`ppomq train`, every figure is read back from the run dir and the actors' logs, and the
table compares each arm with lockstep on the same seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import run_ahead as bench

pytestmark = pytest.mark.slow


def test_two_arms_on_a_tiny_cartpole_give_every_figure(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(
        bench.TASKS, "cartpole", dict(bench.TASKS["cartpole"], steps=3000, target=600.0)
    )
    code = bench.main(["--tasks", "cartpole", "--arms", "lockstep,runahead-vtrace",
                       "--seeds", "1", "--out", str(tmp_path), "--workdir",
                       str(tmp_path / "runs"), "--lock", ""])  # fmt: skip
    doc = json.loads((tmp_path / "run_ahead.json").read_text())
    assert code == 0, [r.get("error") for r in doc["runs"]]
    by_arm = {r["arm"]: r for r in doc["runs"]}
    assert "--targets vtrace" in by_arm["runahead-vtrace"]["command"]
    assert "--batches-per-version 1" in by_arm["lockstep"]["command"]
    for r in by_arm.values():
        assert 0 < r["actor_sample_share"] <= 1
        assert 0 <= r["learner_wait_share"] <= 1
        assert r["mean_policy_age"] >= 0 and 0 <= r["waste_ratio"] < 1
        assert r["env_steps"] >= 3000 and r["time_to_target_s"] is None  # 600: out of reach
    # Actors that never wait for weights spend more of their loop sampling.
    ahead, lockstep = by_arm["runahead-vtrace"], by_arm["lockstep"]
    assert ahead["actor_sample_share"] > lockstep["actor_sample_share"]
    rows = {row["arm"]: row for row in doc["summary"]}
    assert rows["lockstep"]["command_s_vs_lockstep"] == 1.0
    md = (tmp_path / "run_ahead.md").read_text()
    assert "| cartpole | runahead-vtrace | 2 | 1 |" in md


def test_the_scan_keeps_the_update_size_of_two_actors() -> None:
    jobs = bench.plan(["cartpole"], ["runahead-vtrace"], [1], scan=True)
    sizes = {}
    for job in jobs:
        argv = bench.command(job, Path("/r"))
        sizes[job.actors] = argv[argv.index("--batch-samples") + 1]
    assert sizes == {2: "0", 1: "512", 4: "512"}  # 0: 2 actors x 8 envs x 32 steps = 512
