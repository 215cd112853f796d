"""`ppomq bench compare` on real run dirs from two tiny `ppomq train` runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"
TINY = ["--num-envs", "4", "--num-steps", "32", "--update-epochs", "2",
        "--total-steps", "2048", "--eval-episodes", "1", "--no-progress"]  # fmt: skip


def ppomq(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    return subprocess.run([sys.executable, "-m", "ppomq.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    dirs = []
    for mode in ("sync", "async"):
        run_dir = root / mode
        out = ppomq("train", "--mode", mode, "--actors", "2", "--run-dir", str(run_dir), *TINY)
        assert out.returncode == 0, out.stdout + out.stderr
        dirs.append(run_dir)
    return dirs[0], dirs[1]


def test_table_report_and_png(runs, tmp_path):
    a, b = runs
    out = ppomq("bench", "compare", str(a), str(b), "-o", str(tmp_path / "cmp"))
    assert out.returncode == 0, out.stderr
    for label in ("A: sync", "B: async", "env steps", "wall time (s)", "SPS", "solved at",
                  "final eval return", "versions", "waste ratio", "learner sgd"):  # fmt: skip
        assert label in out.stdout, label
    report = (tmp_path / "cmp" / "report.txt").read_text()
    assert "learner publish" in report and str(a) in report
    assert "V-trace" not in report  # not live: no document may claim it
    assert (tmp_path / "cmp" / "compare.png").read_bytes()[:8] == PNG


def test_json_carries_both_runs(runs, tmp_path):
    a, b = runs
    out = ppomq("bench", "compare", str(a), str(b), "-o", str(tmp_path / "j"), "--json",
                "--labels", "S,A")  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["a"]["label"] == "S" and doc["b"]["label"] == "A"
    assert doc["a"]["mode"] == "sync" and doc["b"]["mode"] == "async"
    assert doc["a"]["env_steps"] >= 2048 and doc["b"]["sps"] > 0
    assert set(doc["a"]["learner_time_s"]) == {"wait", "targets", "sgd", "publish"}
    assert Path(doc["plot"]).exists() and Path(doc["report"]).exists()


def test_a_run_without_summary_is_compared_from_its_csvs(runs, tmp_path):
    a, b = runs
    killed = tmp_path / "killed"
    shutil.copytree(b, killed)
    (killed / "summary.json").unlink()  # as a run killed before its warm stop leaves it
    out = ppomq("bench", "compare", str(a), str(killed), "-o", str(tmp_path / "k"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["b"]["finished"] is False and doc["b"]["env_steps"] > 0
    assert any("no summary.json" in n for n in doc["notes"])


def test_missing_and_invalid_run_dirs_are_one_line_errors(runs, tmp_path):
    a, _ = runs
    missing = ppomq("bench", "compare", str(a), str(tmp_path / "nope"))
    assert missing.returncode == 3
    assert missing.stderr.count("\n") == 1 and "not found" in missing.stderr

    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    bad = ppomq("bench", "compare", str(not_a_run), str(a))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "not a ppomq run dir" in bad.stderr

    corrupt = tmp_path / "corrupt"
    shutil.copytree(a, corrupt)
    (corrupt / "summary.json").write_text("{not json")
    broken = ppomq("bench", "compare", str(a), str(corrupt))
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1, broken.stderr

    usage = ppomq("bench", "compare", str(a))
    assert usage.returncode == 2
    assert ppomq("bench").returncode == 2
