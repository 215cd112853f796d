"""Smoke test of `python -m benchmarks.e2e`: a tiny budget, asserting only that it runs and
writes well-formed results (never how fast anything was)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from benchmarks.contenders.common import SolveTracker, thin
from benchmarks.e2e import METRICS, check_targets, ratios, stats, summarise

REPO = Path(__file__).resolve().parents[2]
HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None


def test_solve_tracker_needs_a_full_window_at_the_target() -> None:
    t = SolveTracker(target=10.0)
    for i in range(19):
        assert not t.add(100.0, env_steps=i + 1, now=float(i))
    assert t.add(100.0, env_steps=20, now=19.0)  # the 20th episode completes the window
    assert (t.solved_at_env_steps, t.solved_unix) == (20, 19.0)
    t.add(0.0, env_steps=21, now=20.0)
    assert t.solved_at_env_steps == 20  # the first time counts


def test_thin_keeps_the_last_point_and_the_limit() -> None:
    pts = list(range(1000))
    out = thin(pts, limit=50)
    assert len(out) == 50 and out[0] == 0 and out[-1] == 999
    assert thin(pts[:10], limit=50) == pts[:10]


def test_stats_ratios_and_targets_from_records() -> None:
    from benchmarks.e2e import RunRecord

    recs = []
    for seed, (wall, sps) in enumerate([(4.0, 8000.0), (6.0, 6000.0)]):
        common = {"seed": seed, "ok": True, "solved": True, "steps_to_target": 30000}
        recs.append(
            RunRecord(
                contender="ppomq-async-2",
                wall_from_first_step_s=wall,
                wall_from_command_s=wall + 6,
                sps=sps,
                startup_s=3.0,
                peak_pss_mb=500.0,
                **common,
            )
        )
        recs.append(
            RunRecord(
                contender="sb3",
                wall_from_first_step_s=10.0,
                wall_from_command_s=13.0,
                sps=3000.0,
                startup_s=3.0,
                peak_pss_mb=300.0,
                **common,
            )
        )
    summary = summarise(recs, ["ppomq-async-2", "sb3"])
    assert summary["ppomq-async-2"]["wall_from_first_step_s"] == {
        "median": 5.0,
        "min": 4.0,
        "max": 6.0,
        "n": 2,
    }
    rat = ratios(summary)
    assert rat["ppomq-async-2"]["wall_from_first_step_s"] == 0.5
    assert rat["ppomq-async-2"]["sps"] == pytest.approx(7000 / 3000, abs=1e-3)
    met = {t["what"]: t["met"] for t in check_targets(summary, rat)}
    assert met["wall from first env step / SB3"] is True
    assert met["SPS / SB3"] is True
    assert met["wall from command start / SB3"] is False  # 11 / 13 > 0.75
    assert met["peak PSS (GB)"] is True
    assert stats([]) is None


def _finite_or_none(value: object) -> bool:
    return value is None or (isinstance(value, int | float) and math.isfinite(value))


@pytest.mark.slow
def test_quick_run_writes_well_formed_results(tmp_path: Path) -> None:
    contenders = ["ppomq-async-2"] + (["sb3"] if HAS_SB3 else [])
    out = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    # A low target so that the solved path is exercised within the tiny cap.
    args = ["--quick", "--seeds", "1", "--target", "30", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.e2e", *args, "--contenders", ",".join(contenders)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "e2e.json").read_text())
    assert doc["benchmark"] == "e2e-cartpole" and doc["quick"] is True and doc["complete"]
    assert set(doc["contenders"]) == set(contenders)
    assert len(doc["runs"]) == len(contenders)
    for run in doc["runs"]:
        assert run["ok"], run["error"]
        for key, _, _ in METRICS:
            assert _finite_or_none(run[key]), (key, run[key])
        assert run["startup_s"] > 0 and run["peak_pss_mb"] > 0 and run["env_steps"] > 0
        assert run["command_s"] >= run["startup_s"]
        assert run["curve"] and all(len(p) == 3 for p in run["curve"])
        if run["solved"]:
            assert run["wall_from_command_s"] >= run["wall_from_first_step_s"] >= 0
            assert 0 < run["steps_to_target"] <= run["env_steps"]
    ppomq = next(r for r in doc["runs"] if r["contender"] == "ppomq-async-2")
    assert {"redis-server", "learner", "weightserver", "actor"} <= set(ppomq["peak_pss_by_role_mb"])
    d = ppomq["detail"]
    assert set(d["learner_time_s"]) == {"wait", "targets", "sgd", "publish"}
    assert 0.0 <= d["waste_ratio"] <= 1.0
    assert d["per_update"]["updates"] >= 1
    for name in contenders:
        assert doc["summary"][name]["ok_runs"] == 1
    if HAS_SB3:
        assert set(doc["ratios"]) == {"ppomq-async-2"}
        assert {t["what"] for t in doc["targets"]} >= {"SPS / SB3", "peak PSS (GB)"}
    md = (out / "e2e.md").read_text()
    assert md.startswith("# End to end, CartPole-v1") and "| ppomq async, 2 actors |" in md
    with Image.open(out / "e2e.png") as png:  # a real picture, not an empty file
        assert png.format == "PNG" and png.width > 100 and png.height > 100
