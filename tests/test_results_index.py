"""benchmarks/results/ holds each benchmark's current result and nothing else, and its
index (benchmarks/results/README.md) says where each figure comes from.

The folder is where people look for figures, so a file left there is read as current:
every file must be named in the index, every path the index links must exist, and no name
may say when or in which round it was made (an issue, a round, a date, before/after): a
re-run replaces the current files and git history keeps the old ones. The docs pages show
the results' own plots through symlinks under docs/benchmarks/img/, so there is one copy.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DOCS_IMG = REPO / "docs" / "benchmarks" / "img"
INDEX_NAME = "README.md"

# Names that date a result or tie it to a round of work rather than to what it measures.
STALE_NAME = re.compile(
    r"issue|round|before|after|final|\b(old|new|prev|latest)\b|_(old|new|prev|latest)\b"
    r"|\d{4}[-_]\d{2}[-_]\d{2}|(?<!\d)20\d{6}(?!\d)",
    re.IGNORECASE,
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def index_links(index: Path) -> set[Path]:
    """The local paths the index links to, resolved (anchors and web links left out)."""
    targets = set()
    for target in LINK.findall(index.read_text()):
        if "://" in target or target.startswith("#"):
            continue
        targets.add((index.parent / target.split("#", 1)[0]).resolve())
    return targets


def problems(results: Path) -> list[str]:
    """What is wrong with a results folder against its index, one line each."""
    index = results / INDEX_NAME
    if not index.is_file():
        return [f"{index} is missing: the folder needs its index"]
    found = []
    linked = index_links(index)
    for path in sorted(results.rglob("*")):
        rel = path.relative_to(results)
        if STALE_NAME.search(path.name):
            found.append(f"{rel}: named after an issue, a round or a date")
        if path.is_file() and path != index and path.resolve() not in linked:
            found.append(f"{rel}: not in {INDEX_NAME}")
    for target in sorted(linked):
        if not target.exists():
            missing = os.path.relpath(target, results)
            found.append(f"{INDEX_NAME} links {missing}, which does not exist")
    return found


def index_rows(index: Path) -> list[list[str]]:
    """The cells of the index table's body rows."""
    rows = []
    for line in index.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or set(cells[0]) <= {"-", ":"} or cells[0] == "benchmark":
            continue
        rows.append(cells)
    return rows


def test_every_result_is_indexed_and_named_for_what_it_measures():
    assert problems(RESULTS) == []


def test_each_index_row_gives_figure_command_date_machine_result_and_page():
    rows = index_rows(RESULTS / INDEX_NAME)
    assert rows, "the index has no table"
    for benchmark, figure, command, date, machine, result, page in rows:
        assert figure and machine, benchmark
        runs = ("python -m benchmarks.", "bash benchmarks/")
        assert any(r in command for r in runs), f"{benchmark}: no command"
        assert DATE.match(date), f"{benchmark}: date {date!r} is not YYYY-MM-DD"
        assert "](" in result and "docs/benchmarks/" in page, benchmark


def test_the_check_finds_unindexed_missing_and_dated_results(tmp_path):
    (tmp_path / INDEX_NAME).write_text("| [md](kept.md) · [md](gone.md) |\n")
    (tmp_path / "kept.md").write_text("x")
    (tmp_path / "stray.json").write_text("{}")
    (tmp_path / "issue19_e2e").mkdir()
    (tmp_path / "issue19_e2e" / "e2e.md").write_text("x")
    (tmp_path / "scaling_2026-11-24.md").write_text("x")
    (tmp_path / "train_before_after.md").write_text("x")
    found = "\n".join(problems(tmp_path))
    assert "stray.json: not in" in found
    assert "gone.md, which does not exist" in found
    for name in ("issue19_e2e", "scaling_2026-11-24.md", "train_before_after.md"):
        assert f"{name}: named after" in found
    assert "kept.md" not in found.replace("gone.md", "")


def test_docs_plots_are_the_results_own_files():
    plots = sorted(DOCS_IMG.iterdir())
    assert plots
    for plot in plots:
        assert plot.is_symlink(), f"{plot.name}: a copy, not a link to benchmarks/results/"
        target = plot.resolve()
        assert target.is_file(), f"{plot.name} points at nothing"
        assert target.is_relative_to(RESULTS), f"{plot.name} points outside benchmarks/results/"
