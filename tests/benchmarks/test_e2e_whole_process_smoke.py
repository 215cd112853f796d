"""Smoke test of `python -m benchmarks.e2e_whole_process`: one pair at a low target,
asserting only that it runs and writes well-formed results (never how fast)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SB3, reason="stable-baselines3 is not installed (the bench extra)")
def test_one_pair_writes_well_formed_results(tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.e2e_whole_process", "--seeds", "1",
         "--target", "30", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "e2e_whole_process.json").read_text())
    assert doc["benchmark"] == "e2e-whole-process" and doc["summary"]["ok_pairs"] == 1
    (pair,) = doc["pairs"]
    assert pair["ok"] and pair["ratio"] > 0
    assert set(pair["runs"]) == {"ppomq-async-2", "sb3"}
    t = pair["ppomq_timeline"]
    for key in ("first env step", "last update", "exit", "startup_s", "shutdown_s",
                "overhead_s", "overhead_to_prompt_s"):  # fmt: skip
        assert key in t, key
    md = (out / "e2e_whole_process.md").read_text()
    assert md.startswith("# Whole-process time to solve CartPole-v1")
