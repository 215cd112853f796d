"""End to end: a damaged or removed checkpoint never leads to counters reset under the
run's old records. `ppomq train` stops in one line naming the damage and the ways on;
with --recover the run goes on, and its summary agrees with its own records."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ppomq.core.rundir import read_csv

from .cli import PPOMQ, SMALL, clean_env
from .test_train_faults import _solved_at

pytestmark = pytest.mark.slow


def _train(run_dir: Path, total: int, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PPOMQ, "train", "--actors", "1", "--total-steps", str(total), "--run-dir",
         str(run_dir), "--eval-episodes", "0", *SMALL, *extra],
        capture_output=True, text=True, timeout=240, env=clean_env(),
    )  # fmt: skip


def _error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("ppomq: error:")]
    assert len(lines) == 1, out.stderr
    return lines[0]


def _records(run_dir: Path) -> tuple[list[bytes], list[bytes]]:
    return [(run_dir / name).read_bytes() for name in ("episodes.csv", "progress.csv")]  # type: ignore[return-value]


def _agrees_with_its_records(run_dir: Path) -> dict:  # type: ignore[type-arg]
    summary = json.loads((run_dir / "summary.json").read_text())
    episodes = read_csv(run_dir / "episodes.csv")
    progress = read_csv(run_dir / "progress.csv")
    assert summary["episodes"] == len(episodes)
    steps = [r["env_steps"] for r in episodes]
    assert steps == sorted(steps), "env steps went back inside episodes.csv"
    versions = [r["version"] for r in progress]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert progress[-1]["env_steps"] == summary["total_env_steps"]
    assert summary["solved_at_env_steps"] == _solved_at(episodes, summary["solve_threshold"])
    return summary


def test_a_damaged_then_removed_checkpoint_stops_the_run_and_recover_goes_on(tmp_path):
    run_dir = tmp_path / "run"
    first = _train(run_dir, 3000)
    assert first.returncode == 0, first.stderr[-2000:]
    steps_before = json.loads((run_dir / "summary.json").read_text())["total_env_steps"]

    ckpt = run_dir / "checkpoints" / "ckpt.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # truncated
    records = _records(run_dir)
    line = _error_line(_train(run_dir, 6000))
    assert "damaged" in line and "--recover" in line and "--run-dir" in line, line
    assert _records(run_dir) == records

    # The old advice, followed: the checkpoints moved away. Still no reset under old rows.
    for name in ("ckpt.pt", "ckpt.prev.pt"):
        (run_dir / "checkpoints" / name).rename(tmp_path / name)
    line = _error_line(_train(run_dir, 6000))
    assert "missing" in line and "--recover" in line, line
    assert _records(run_dir) == records

    recovered = _train(run_dir, 6000, "--recover")
    assert recovered.returncode == 0, recovered.stderr[-2000:]
    summary = _agrees_with_its_records(run_dir)
    assert summary["total_env_steps"] >= 6000 > steps_before
