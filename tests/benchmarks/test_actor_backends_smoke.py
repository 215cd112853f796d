"""benchmarks/actor_backends.py: which backends it runs, its report from the runs, and a real
run on a tiny budget (slow). Figures are never asserted: timing belongs to the benchmark."""

from __future__ import annotations

import importlib.util
import json

import pytest

from benchmarks import actor_backends as ab

BREAKOUT = "BreakoutNoFrameskip-v4"

pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")


def test_envpool_is_left_out_with_a_note_exactly_when_it_is_not_installed():
    skipped = ab.skipped_backends(["gymnasium", "ale", "envpool"], [BREAKOUT])
    installed = importlib.util.find_spec("envpool") is not None
    assert ("envpool" in skipped) is not installed
    if not installed:
        assert "pip install -e '.[envpool]'" in skipped["envpool"]
    kept = {b for _, _, _, b in ab.configs([BREAKOUT], [1], ["gymnasium", "ale", "envpool"],
                                             ["raw"])}  # fmt: skip
    assert kept == {"gymnasium", "ale"} | ({"envpool"} if installed else set())


def test_ale_is_left_out_for_ids_that_are_not_atari():
    skipped = ab.skipped_backends(["gymnasium", "ale"], [BREAKOUT, "CartPole-v1"])
    assert list(skipped) == ["ale CartPole-v1"]
    todo = ab.configs([BREAKOUT, "CartPole-v1"], [1, 8], ["gymnasium", "ale"], ["policy"])
    assert ("policy", "CartPole-v1", 8, "gymnasium") in todo
    assert ("policy", BREAKOUT, 8, "ale") in todo
    assert not any(e == "CartPole-v1" and b == "ale" for _, e, _, b in todo)


def test_rows_give_each_backends_median_and_its_ratio_to_gymnasium_for_both_modes():
    def got(cpu, *sps):
        return [{"sps": s, "cpu_cores": cpu, "steps_per_cpu_s": s / cpu} for s in sps]

    runs = {
        ("policy", BREAKOUT, 8, "gymnasium"): got(1.0, 90, 100, 300),
        ("policy", BREAKOUT, 8, "ale"): got(1.2, 150, 160, 170),
        ("raw", BREAKOUT, 8, "gymnasium"): got(1.0, 400, 500, 600),
        ("raw", BREAKOUT, 8, "ale"): got(1.9, 900, 1000, 1100),
    }
    rows = ab.summarise(runs, ["gymnasium", "ale", "envpool"])
    assert [(r["mode"], r["num_envs"]) for r in rows] == [("policy", 8), ("raw", 8)]
    policy, raw = rows
    assert policy["gymnasium"]["median_sps"] == 100 and policy["ale"]["median_sps"] == 160
    assert policy["ale_over_gymnasium"] == 1.6 and raw["ale_over_gymnasium"] == 2.0
    # Round by round: 150/90, 160/100, 170/300.
    assert policy["ale_over_gymnasium_by_round"] == {"median": 1.6, "min": 0.567, "max": 1.667}
    assert policy["ale"]["steps_per_cpu_s"] == 133.3  # median of 150, 160, 170 over 1.2 CPU
    assert raw["ale_over_gymnasium_per_cpu_s"] == round((1000 / 1.9) / 500, 3)
    assert "envpool" not in policy and "envpool_over_gymnasium" not in policy
    machine = {"cpus": 2, "cpu_model": "cpu", "platform": "linux", "python": "3",
               "ale_py": "0.12.1"}  # fmt: skip
    doc = {"command": "x", "machine": machine, "date": "d", "backends": ["gymnasium", "ale",
           "envpool"], "skipped": {"envpool": "envpool is not installed here"},
           "load_before": [0.1, 0.1, 0.1], "load_after": [0.2, 0.2, 0.2], "rows": rows,
           "args": {"warmup_s": 2.0, "window_s": 8.0, "rounds": 3, "num_steps": 128}}  # fmt: skip
    md = ab.markdown(doc)
    assert "Left out: envpool is not installed here." in md
    assert (
        "| env | N | gymnasium SPS | ale SPS | ale / gymnasium, by round | CPU gymnasium | "
        "CPU ale | steps per CPU s, gymnasium | steps per CPU s, ale | ale / gymnasium per "
        "CPU s |" in md
    )
    assert (
        f"| {BREAKOUT} | 8 | 100 (90-300) | 160 (150-170) | 1.60x (0.57-1.67) | 1.00 | 1.20 | "
        "100 | 133 | 1.33x |" in md
    )
    assert f"| {BREAKOUT} | 8 | 500 (400-600) | 1,000 (900-1,100) | 2.00x (1.83-2.25) |" in md


@pytest.mark.slow
def test_a_tiny_run_measures_both_modes_for_gymnasium_and_ale_and_writes_its_results(tmp_path):
    pytest.importorskip("cv2", reason="the gymnasium Atari pipeline needs OpenCV")
    out = tmp_path / "actor_backends"
    ab.main(["--num-envs", "2", "--rounds", "1", "--warmup-s", "0", "--window-s", "0.2",
             "--num-steps", "8", "--backends", "gymnasium,ale", "--out", str(out)])  # fmt: skip
    doc = json.loads(out.with_suffix(".json").read_text())
    assert [(r["mode"], r["num_envs"]) for r in doc["rows"]] == [("policy", 2), ("raw", 2)]
    for row in doc["rows"]:
        assert row["gymnasium"]["median_sps"] > 0 and row["ale"]["median_sps"] > 0
        assert row["ale_over_gymnasium"] > 0
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# Actor SPS by env backend: gymnasium, ale")
    assert "## policy" in md and "## raw" in md
