"""Smoke test of `python -m benchmarks.train_curve`: the summary and report from fabricated
pairs (an unsolved run reported, not hidden), and one real pair at a low target, asserting
only that it runs and writes well-formed results (never how fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.train_curve import CURVE, PLAIN, render_markdown, summarise

REPO = Path(__file__).resolve().parents[2]


def _run(command_s: float, solve_s: float | None, sps: float) -> dict[str, Any]:
    return {
        "ok": True, "error": None, "solved": solve_s is not None, "command_s": command_s,
        "solved_at_env_steps": 30000 if solve_s else None, "solved_at_wall_s": solve_s,
        "command_to_solve_s": None, "env_steps": 30000 if solve_s else 500000, "sps": sps,
        "sps_first_step_to_solve": sps, "startup_s": 1.5, "shutdown_s": 0.2,
        "keys_made": True, "load1_before": 1.0, "load1_after": 1.2,
        "foreign_cpu_cores": 0.1, "peak_pss_mb": 400.0, "command": "ppomq train --curve",
    }  # fmt: skip


def _pair(seed: int, plain: dict[str, Any], curve: dict[str, Any]) -> dict[str, Any]:
    ok = plain["solved"] and curve["solved"]
    keys = ("command_s", "solved_at_wall_s", "sps")
    return {
        "seed": seed,
        "order": [PLAIN, CURVE] if seed % 2 == 0 else [CURVE, PLAIN],
        "ok": ok,
        "ratios": {k: round(curve[k] / plain[k], 3) if ok else None for k in keys},
        "runs": {PLAIN: plain, CURVE: curve},
    }


def test_summary_and_report_from_fabricated_pairs() -> None:
    pairs = [
        _pair(0, _run(6.0, 4.0, 8000.0), _run(6.6, 4.4, 7200.0)),
        _pair(1, _run(8.0, 6.0, 8000.0), _run(8.0, 6.0, 8000.0)),
        _pair(2, _run(5.0, 3.0, 8000.0), _run(60.0, None, 7000.0)),  # CURVE never solved
    ]
    s = summarise(pairs)
    assert (s["pairs"], s["ok_pairs"]) == (3, 2)
    assert s["median_pair_ratio"]["command_s"] == pytest.approx(1.05)
    assert s["pair_ratio_range"]["command_s"] == [1.0, 1.1]
    assert s["arms"][CURVE]["solved"] == 2 and s["arms"][PLAIN]["solved"] == 3
    assert s["arms"][CURVE]["command_s_all"]["max"] == 60.0  # the unsolved run still counts
    doc = {
        "command": "python -m benchmarks.train_curve --seeds 3",
        "started_at": "now", "target": 475.0, "cap": 500000, "lock": None, "note": None,
        "defaults": {"mode": "async", "actors": 2, "torch_threads": 1},
        "load1_before_runs": 1.0, "load1_after_runs": 1.2, "summary": s, "pairs": pairs,
        "machine": {"platform": "x", "python": "3", "cpus": 2, "libzmq": "4", "pyzmq": "27"},
    }  # fmt: skip
    md = render_markdown(doc)
    assert md.startswith("# Whole-process cost of CURVE")
    assert "2/3 pairs solved by both" in md
    assert "- seed 2: CURVE: not solved in 500000 steps" in md


@pytest.mark.slow
def test_one_pair_writes_well_formed_results(tmp_path: Path) -> None:
    out, runs = tmp_path / "results", tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.train_curve", "--seeds", "1", "--target", "30",
         "--cap", "20000", "--out", str(out), "--workdir", str(runs)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "train_curve.json").read_text())
    assert doc["benchmark"] == "train-curve" and doc["complete"]
    assert doc["summary"]["ok_pairs"] == 1
    (pair,) = doc["pairs"]
    assert pair["order"] == [PLAIN, CURVE] and all(v > 0 for v in pair["ratios"].values())
    plain, curve = pair["runs"][PLAIN], pair["runs"][CURVE]
    assert curve["command"].endswith("--curve") and plain["command"].endswith("--no-curve")
    assert curve["keys_made"] and not plain["keys_made"]
    assert (runs / "ppomq-curve-s0" / "keys" / "server.key").exists()
    assert (out / "train_curve.md").read_text().startswith("# Whole-process cost of CURVE")
