"""`python -m benchmarks.learner_group` end to end on tiny real runs: one learner and a
group of two on CartPole, both objectives at W = 2, and the straggler study with its
hand-started slow actor, and the all-reduce probe; every figure is read back from the run
dirs. Speedups are not asserted (timing belongs to the benchmark)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from benchmarks import learner_group as bench


def test_the_arms_of_a_comparison_alternate_round_by_round() -> None:
    jobs = bench.plan(["scaling"], ["cartpole"], "halfcheetah", rounds=2)
    assert [(j.arm, j.seed) for j in jobs] == [("W1", 1), ("W2", 1), ("W2", 2), ("W1", 2)]


def test_steady_figures_start_past_the_given_share_of_the_run() -> None:
    rows = [
        {"env_steps": str(1000 * i), "wall_s": str(1.0 * i + (5 if i else 0)),
         "charts/samples": "1000", "time/learner_wait": "0.1", "time/learner_sgd": "0.5",
         "time/learner_allreduce": "0.2" if i else "", "time/learner_targets": "0.01",
         "time/learner_publish": "0.01"}
        for i in range(9)
    ]  # fmt: skip
    got = bench.steady(rows, steady_from=0.25)
    # Origin: the update at 2,000 of 8,000 steps; the 5 s start-up before it is left out.
    assert got["steady_sps"] == pytest.approx(1000.0) and got["steady_updates"] == 6
    assert got["update_ms"]["allreduce"] == pytest.approx(200.0)
    assert got["update_total_ms"] == pytest.approx(1000.0)


def test_a_later_invocation_replaces_only_the_studies_it_runs(tmp_path: Path) -> None:
    old = {
        "benchmark": "learner-group", "meta": {"command": "first"},
        "invocations": [{"command": "first", "studies": ["scaling", "straggler", "allreduce"]}],
        "runs": [{"study": "scaling", "round": 0}, {"study": "straggler", "round": 0}],
        "allreduce": [{"busy": 0}],
    }  # fmt: skip
    (tmp_path / "learner_group.json").write_text(json.dumps(old))
    doc = bench.previous(tmp_path, ["straggler"], keep=True)
    assert [r["study"] for r in doc["runs"]] == ["scaling"] and doc["allreduce"] == [{"busy": 0}]
    doc["invocations"].append({"command": "second", "studies": ["straggler"]})
    doc["runs"].append({"study": "straggler", "round": 0})
    assert bench._invocations(doc) == "`first`, then `second`"
    assert bench.previous(tmp_path, ["allreduce"], keep=True).get("allreduce") is None
    assert bench.previous(tmp_path, ["straggler"], keep=False)["runs"] == []


@pytest.mark.slow
def test_quick_run_measures_every_study(tmp_path: Path) -> None:
    out = tmp_path / "results"
    code = bench.main(["--quick", "--tasks", "cartpole", "--objective-task", "cartpole",
                       "--steps", "cartpole=4000", "--straggler-steps", "4000", "--out",
                       str(out), "--workdir", str(tmp_path / "runs"), "--lock", ""])  # fmt: skip
    doc = json.loads((out / "learner_group.json").read_text())
    assert code == 0, [r.get("error") for r in doc["runs"]]
    runs = {(r["study"], r["arm"]): r for r in doc["runs"]}
    assert set(runs) == {("scaling", "W1"), ("scaling", "W2"), ("objective", "clip"),
                         ("objective", "kl-penalty"), ("straggler", "wait-all"),
                         ("straggler", "rule")}  # fmt: skip
    for (study, arm), r in runs.items():
        assert r["env_steps"] >= 4000 and r["steady_sps"] > 0 and r["command_s"] > 0
        assert r["learners"] == (1 if arm == "W1" else 2)
        # A learner alone has no collectives; a group's all-reduces are inside its SGD.
        allreduce, sgd = r["update_ms"]["allreduce"], r["update_ms"]["sgd"]
        assert (allreduce == 0) if arm == "W1" else (0 < allreduce < sgd)
        if study == "scaling":  # the same total batch whatever W
            assert "--batch-samples 1024" in r["command"]
            # An elastic learner may train on less when an actor is late (loop.py), never more.
            assert 0 < r["samples_per_update"] <= 1024
            with open(Path(r["run_dir"]) / "progress.csv", newline="") as fh:
                per_update = [float(row["charts/samples"]) for row in csv.DictReader(fh)]
            assert per_update and max(per_update) <= 1024, per_update
    assert "--objective kl-penalty" in runs[("objective", "kl-penalty")]["command"]
    for arm in ("wait-all", "rule"):
        r = runs[("straggler", arm)]
        assert " ".join(bench.STRAGGLER_ARMS[arm]) in r["command"]
        assert r["slow_actor"]["accepted"] > 0  # the actor started beside the run trained
    scaling = next(e for e in doc["summary"] if e["study"] == "scaling")
    assert math.isclose(scaling["efficiency"], scaling["speedup"] / 2, abs_tol=1e-3)
    probe = {p["busy"]: p for p in doc["allreduce"]}
    assert set(probe) == set(bench.PROBE_BUSY)
    assert all(0 < p["median_ms"] <= p["p90_ms"] for p in probe.values())
    md = (out / "learner_group.md").read_text()
    assert "| CartPole-v1 (learner-bound) | 2 | 1 |" in md
    assert "BENCH_SLEEP_STEP_S=0.006" in md  # the slow actor's command, 3 x 2 ms
