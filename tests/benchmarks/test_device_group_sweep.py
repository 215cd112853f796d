"""benchmarks.device.group_sweep (the GPU machine's learner-group sweep): the same total
batch at every W, S and E against W = 1, the learner's time split; and, slow, a real sweep
of W = 1 and 2 on CartPole read back from its run dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.device import group_sweep as sweep


def test_the_default_sweep_keeps_the_total_batch_and_equal_actors_per_rank() -> None:
    assert sweep.check_shapes(list(sweep.TASKS), [1, 2, 4, 8], actors=8) is None
    # 16 ranks would each take one whole 128-sample batch: 2,048 samples, not 1,024.
    assert "not a whole number" in (sweep.check_shapes(["cartpole"], [1, 16], actors=16) or "")
    assert "does not split evenly" in (sweep.check_shapes(["cartpole"], [1, 3], actors=8) or "")


def test_baselines_run_first_and_gpu_references_last() -> None:
    arms = sweep.plan(["cartpole", "halfcheetah"], [1, 2, 4], cuda_reference=True)
    assert [a.name for a in arms] == [
        "cartpole-W1-cpu", "cartpole-W2-cpu", "cartpole-W4-cpu",
        "halfcheetah-W1-cpu", "halfcheetah-W2-cpu", "halfcheetah-W4-cpu",
        "cartpole-W1-cuda", "halfcheetah-W1-cuda",
    ]  # fmt: skip


def test_time_split_counts_the_collectives_once() -> None:
    # The trainer times its collectives inside targets + SGD: they come out of compute.
    got = sweep.time_split(
        {"wait": 2.0, "sgd": 5.0, "allreduce": 2.0, "targets": 2.0, "publish": 1.0}
    )
    assert got == {"wait": 0.2, "compute": 0.5, "communication": 0.2, "publish": 0.1}
    assert sweep.time_split({"wait": 1.0, "sgd": 3.0}) == {
        "wait": 0.25, "compute": 0.75, "communication": 0.0, "publish": 0.0,
    }  # fmt: skip
    assert sweep.time_split(None) is None


def test_speedup_and_efficiency_are_against_the_cpu_learner_alone() -> None:
    def run(task: str, w: int, device: str, steady: float, sps: float) -> dict:
        return {"task": task, "learners": w, "device": device, "ok": True,
                "steady_sps": steady, "sps": sps}  # fmt: skip

    runs = [
        run("cartpole", 1, "cpu", 1000, 800),
        run("cartpole", 4, "cpu", 3600, 2400),
        run("cartpole", 1, "cuda", 1500, 1000),
        run("halfcheetah", 2, "cpu", 900, 700),
    ]
    sweep.ratios(runs)
    w1, w4, gpu, orphan = runs
    assert (w1["speedup"], w1["efficiency"]) == (1.0, 1.0)
    assert (w4["speedup"], w4["efficiency"]) == (3.6, 0.9)
    assert (w4["speedup_whole"], w4["efficiency_whole"]) == (3.0, 0.75)
    assert (gpu["speedup"], gpu["efficiency"]) == (1.5, None)  # one learner: no E
    assert "speedup" not in orphan  # no W = 1 run of its task to compare with


@pytest.mark.slow
def test_a_real_sweep_of_one_and_two_learners(tmp_path: Path) -> None:
    out = tmp_path / "results"
    code = sweep.main(["--out", str(out), "--learners", "1,2", "--tasks", "cartpole",
                       "--duration-s", "8", "--workdir", str(tmp_path / "runs"),
                       "--lock", ""])  # fmt: skip
    doc = json.loads((out / "group_sweep.json").read_text())
    assert code == 0, [r.get("error") for r in doc["runs"]]
    assert [(r["learners"], r["device"]) for r in doc["runs"]] == [(1, "cpu"), (2, "cpu")]
    for r in doc["runs"]:
        assert f"--learners {r['learners']} " in r["command"] and r["steady_sps"] > 0
        # The group's batch, never more (stale batches dropped can make it less).
        assert 0 < r["samples_per_update"] <= 1024
        split = r["time_split"]
        assert (split["communication"] == 0) == (r["learners"] == 1)
    assert doc["runs"][1]["speedup"] > 0 and doc["runs"][1]["efficiency"] > 0
    assert "| CartPole-v1 | 2 | cpu |" in (out / "group_sweep.md").read_text()
