"""A usage error from argparse is one line with the `ppomq: error:` prefix once (never
`ppomq: error: ppomq: unrecognized arguments` for an unknown flag to `ppomq train`)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["train", "--no-such-flag"], "(see ppomq train --help)"),
        (["learner", "--no-such-flag", "x"], "(see ppomq learner --help)"),
        (["--no-such-flag"], "(see ppomq --help)"),
    ],
)
def test_an_unknown_flag_is_one_line_prefixed_once(args, hint):
    res = subprocess.run([sys.executable, "-m", "ppomq.cli", *args], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("ppomq: error: unrecognized arguments: --no-such-flag")
    assert line.count("ppomq:") == 1 and line.endswith(hint), line


def test_a_subcommand_flag_error_names_that_command_once():
    res = subprocess.run([sys.executable, "-m", "ppomq.cli", "learner", "--device"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2
    (line,) = res.stderr.splitlines()
    assert line.startswith("ppomq: error: ") and line.count("ppomq:") == 1, line
    assert "--device" in line and line.endswith("(see ppomq learner --help)"), line


def test_a_prefix_of_a_flag_is_refused_not_taken_for_it():
    """argparse's prefix matching took `--total-step 30000` for --total-steps and trained a
    whole run on a typo's word."""
    res = subprocess.run([sys.executable, "-m", "ppomq.cli", "train", "--total-step", "3000"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2
    (line,) = res.stderr.splitlines()
    assert "unrecognized arguments: --total-step 3000" in line, line
