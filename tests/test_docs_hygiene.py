"""The user-facing documents stay short, current and whole.

The README is read in five minutes (at most 250 lines) and points into the docs site; no
user document carries the project's own tracker numbers, and outside the benchmark records
no dates or commit hashes (development history, which git keeps); every relative link of the
README and of k8s/README.md names a file that exists (`mkdocs build --strict` checks the
site's own links).

Dates and hashes are looked for in prose only: a fenced block holds a command's real
output, where a version's creation time or a sha256 prefix is what the command prints.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
K8S_README = ROOT / "k8s" / "README.md"
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks"

MAX_README_LINES = 250

ISSUE = re.compile(r"\bissues?[ _#-]*\d+", re.IGNORECASE)
ISO_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# A commit hash: 7 to 40 hex digits with at least one digit and one letter (so that
# neither a number nor a word such as "facade" counts).
HASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def user_documents() -> list[Path]:
    return [README, K8S_README, *sorted(DOCS.rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def issue_numbers(text: str) -> list[str]:
    return [f"{n}: {m.group(0)}" for n, line in enumerate(text.splitlines(), 1)
            for m in ISSUE.finditer(line)]  # fmt: skip


def dates_and_hashes(text: str) -> list[str]:
    found = []
    for n, line in prose_lines(text):
        found += [f"{n}: date {m.group(0)}" for m in ISO_DATE.finditer(line)]
        found += [f"{n}: hash {m.group(0)}" for m in HASH.finditer(line)]
    return found


# pytest's closing line ("1083 passed, 5 skipped ... in 221.64s"): the suite's own counts
# and time, which every added test makes stale.
SUITE_COUNTS = re.compile(r"\b\d[\d,]* (passed|failed|skipped|deselected)(,| in \d)")


def suite_counts(text: str) -> list[str]:
    """Lines quoting the test suite's counts, fenced blocks included (a pasted `make test`)."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if SUITE_COUNTS.search(line)]  # fmt: skip


def broken_links(path: Path) -> list[str]:
    """Relative links of a Markdown file (outside fenced blocks) whose file is missing."""
    broken = []
    for n, line in prose_lines(path.read_text()):
        for m in LINK.finditer(line):
            target = m.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # anchors, URLs
                continue
            if not (path.parent / target).exists():
                broken.append(f"{n}: {m.group(1)}")
    return broken


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_readme_is_read_in_five_minutes():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move detail into docs/"
    )


@pytest.mark.parametrize("path", user_documents(), ids=_rel)
def test_no_issue_numbers_in_user_documents(path: Path):
    found = issue_numbers(path.read_text())
    assert not found, f"{_rel(path)} names the tracker's issues (users have none): {found}"


@pytest.mark.parametrize(
    "path", [p for p in user_documents() if BENCHMARKS not in p.parents], ids=_rel
)
def test_no_dates_or_commit_hashes_outside_the_benchmark_records(path: Path):
    found = dates_and_hashes(path.read_text())
    assert not found, (
        f"{_rel(path)} carries development history (dates, commit hashes; "
        f"git keeps them, docs/benchmarks/ dates its measurements): {found}"
    )


@pytest.mark.parametrize(
    "path", [p for p in user_documents() if BENCHMARKS not in p.parents], ids=_rel
)
def test_no_document_quotes_the_test_suites_counts(path: Path):
    """Outside the benchmark records, which report one run's tests as measured."""
    found = suite_counts(path.read_text())
    assert not found, (
        f"{_rel(path)} quotes the suite's counts or time, stale at the next test added "
        f"(say how to get them: pytest's last line): {found}"
    )


@pytest.mark.parametrize("path", [README, K8S_README], ids=_rel)
def test_relative_links_name_files_that_exist(path: Path):
    found = broken_links(path)
    assert not found, f"{_rel(path)} links to files that do not exist: {found}"


def test_the_checks_see_what_they_are_for(tmp_path: Path):
    """Each check finds a planted case and passes a clean one, fences included."""
    assert issue_numbers("as issue 19 asked\nissue19_e2e/") == ["1: issue 19", "2: issue19"]
    assert issue_numbers("the issue's mark; 3 issues") == []
    dated = "run of 2026-11-24 at 093efd0\n```\ncreated 2026-11-24 02:07:19 eb5591c35e1f\n```\n"
    assert dates_and_hashes(dated) == ["1: date 2026-11-24", "1: hash 093efd0"]
    assert dates_and_hashes("sha256, 1,000,000 steps, a facade, 20261126") == []
    assert suite_counts("```\n1,083 passed, 5 skipped in 221.64s\n```\n") == [
        "2: 1,083 passed, 5 skipped in 221.64s"
    ]
    assert suite_counts("the test passed 3 of 3 times; 1 failed (a child that crashes)") == []
    (tmp_path / "there.md").write_text("")
    page = tmp_path / "page.md"
    page.write_text("[a](there.md#x) [b](gone.md) [c](https://x.org/gone) [d](#top)\n"
                    "```\n[e](also-gone.md)\n```\n")  # fmt: skip
    assert broken_links(page) == ["1: gone.md"]
