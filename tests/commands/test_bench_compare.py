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
    assert out.stdout.startswith(f"A: {a}\nB: {b}\n")
    for label in ("env steps", "wall time (s)", "SPS", "solved at",
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


TERMINAL = 80  # columns of the terminal a newcomer reads the table in


def _table(stdout: str) -> list[str]:
    """The table's lines: from its header (the line above the rule) to the blank line."""
    lines = stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line and set(line) == {"-"})
    end = lines.index("", rule)
    return lines[rule - 1 : end]


def _assert_laid_out(stdout: str) -> None:
    """Every line of the table fits the terminal (the legend above it names the runs, as
    long as their paths are); every row has the four columns (metric, A, B, B/A), each
    value ending where its header ends (right-aligned columns)."""
    table = _table(stdout)
    header, rule, rows = table[0], table[1], table[2:]
    assert max(len(line) for line in table) <= TERMINAL, "\n".join(table)
    assert header.split() == ["A", "B", "B/A"], header
    ends = [header.index(" A ") + 2, header.index(" B ") + 2, len(header)]
    assert len(rule) == len(header)
    for row in rows:
        cells = [c for c in row.split("  ") if c.strip()]
        assert len(cells) == 4, row
        for end in ends:
            assert row[end - 1] != " " and (len(row) == end or row[end] == " "), (row, end)


def test_table_fits_a_terminal_and_its_columns_align_whatever_the_run_names(runs, tmp_path):
    # Named as `ppomq train` names run dirs, after the longest run id it takes.
    long_a = tmp_path / "runs" / f"{'a' * 64}-20261126-190917"
    long_b = tmp_path / "runs" / f"{'b' * 64}-20261126-190922"
    for src, dst in zip(runs, (long_a, long_b), strict=True):
        shutil.copytree(src, dst)
    out = ppomq("bench", "compare", str(long_a), str(long_b), "-o", str(tmp_path / "o1"))
    assert out.returncode == 0, out.stderr
    _assert_laid_out(out.stdout)
    assert out.stdout.startswith(f"A: {long_a}\nB: {long_b}\n")
    report = (tmp_path / "o1" / "report.txt").read_text()
    assert "\n".join(_table(out.stdout)) in report
    named = ppomq("bench", "compare", str(long_a), str(long_b), "-o", str(tmp_path / "o1"),
                  "--labels", "sync,async")  # fmt: skip
    assert named.returncode == 0, named.stderr
    _assert_laid_out(named.stdout)
    assert named.stdout.startswith(f"A: sync  ({long_a})\nB: async  ({long_b})\n")


def test_a_run_compared_with_itself_is_laid_out_and_said_so(runs, tmp_path):
    a, _ = runs
    out = ppomq("bench", "compare", str(a), f"{a}/", "-o", str(tmp_path / "o2"))
    assert out.returncode == 0, out.stderr
    _assert_laid_out(out.stdout)
    assert "(A and B are the same run dir)" in out.stdout
    rows = _table(out.stdout)[2:]
    assert all(row.split("  ")[-1].strip() in ("-", "1.00x") for row in rows), rows
