"""The two test tiers: `make test` needs no root, Docker or network namespaces, and CI
runs `make test-all`, the whole suite."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# What only `make test-all` may do: start or use a Docker engine, make network namespaces,
# mount a filesystem (the helpers that do the first two live in benchmarks/deploy/).
PRIVILEGED = re.compile(
    r"benchmarks\.deploy\.(docker_engine|netns)\b|\[\"mount\"|\"ip\", \"netns\""
)


def _make_variable(name: str) -> str:
    match = re.search(rf"^{name} := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, f"Makefile defines no {name}"
    return match.group(1).strip()


def _target_recipe(target: str) -> str:
    text = (REPO / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert match, f"Makefile has no {target} target"
    return match.group(1)


def test_make_test_selects_the_fast_tier_and_make_test_all_everything():
    fast = _make_variable("FAST_TIER")
    for marker in ("slow", "netns", "docker"):
        assert f"not {marker}" in fast, fast
    assert '-m "$(FAST_TIER)"' in _target_recipe("test")
    assert '-m "' not in _target_recipe("test-all")


def test_ci_runs_the_whole_suite_and_builds_the_docs():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "make test-all" in ci
    assert "make test" not in ci
    assert "make docs" in ci


def test_no_file_in_the_fast_tier_uses_docker_netns_or_mount():
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", _make_variable("FAST_TIER")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    files = {line.split("::", 1)[0] for line in collected.splitlines() if "::" in line}
    assert files, collected
    privileged = sorted(f for f in files if PRIVILEGED.search((REPO / f).read_text()))
    assert not privileged, f"mark these slow, netns or docker: {privileged}"
