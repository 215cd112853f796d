"""End to end: `ppomq status` and `ppomq weights` told no run read the run `ppomq train`
started last where they run (the newest run dir under runs/), and say which first."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .cli import PPOMQ, SMALL, clean_env

pytestmark = pytest.mark.slow


def _ppomq(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PPOMQ, *args], capture_output=True, text=True, timeout=240,
                          env=clean_env(), cwd=cwd)  # fmt: skip


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(where they ran, the older run dir, the newer), as `ppomq train` named them."""
    here = tmp_path_factory.mktemp("here")
    made = []
    for steps in ("1024", "2048"):
        out = _ppomq(here, "train", "--total-steps", steps, *SMALL)
        assert out.returncode == 0, out.stdout + out.stderr
        [line] = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("run dir: ")]
        made.append(Path(line.split("run dir: ", 1)[1].strip()))
    assert made[0] != made[1] and all(not p.is_absolute() for p in made), made
    return here, made[0], made[1]


def test_status_without_flags_reads_the_newest_run_dir_and_says_so(two_runs):
    here, _, newer = two_runs
    out = _ppomq(here, "status")
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()[:2]
    assert first.startswith(f"run dir {newer} (the newest under runs/"), first
    assert "--run-dir" in first
    summary = json.loads((here / newer / "summary.json").read_text())
    assert f"{summary['total_env_steps']:,} env steps" in second, second
    doc = _ppomq(here, "status", "--json")
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout)["env_steps"] == summary["total_env_steps"]
    assert doc.stderr.startswith(f"run dir {newer} ")


def test_weights_list_without_flags_reads_the_newest_run_dir_and_says_so(two_runs):
    here, older, newer = two_runs
    out = _ppomq(here, "weights", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"run dir {newer} (the newest under runs/"), lines[0]
    latest = json.loads((here / newer / "summary.json").read_text())["versions"]
    assert lines[1].endswith(f"latest {latest}"), lines[1]
    # --run-dir still reads the one named, and says nothing more.
    named = _ppomq(here, "weights", "list", "--run-dir", str(older))
    assert named.returncode == 0, named.stderr
    assert named.stdout.startswith("run "), named.stdout
    assert "newest" not in named.stdout
