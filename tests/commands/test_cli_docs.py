"""docs/reference/cli.md is the `--help` of every `ppomq` command, as the CLI prints it now."""

from __future__ import annotations

import os
import subprocess
import sys

from ppomq.cli import COMMAND_MODULES, build_parser
from tools.architecture import REPO
from tools.cli_docs import WIDTH, cli_page, commands

PAGE = REPO / "docs" / "reference" / "cli.md"


def test_cli_reference_page_is_current():
    regenerate = "run: python -m tools.cli_docs > docs/reference/cli.md"
    assert PAGE.read_text() == cli_page(), regenerate


def test_the_walk_reaches_every_command_and_verb():
    paths = [" ".join(path) for path, _ in commands(build_parser())]
    assert paths[0] == ""
    assert set(COMMAND_MODULES) <= set(paths)
    assert {"weights list", "weights unprotect", "bench compare", "keys generate"} <= set(paths)
    assert len(paths) == len(set(paths))


def test_each_section_is_what_the_command_prints_in_a_terminal_of_that_width():
    texts = dict((" ".join(path), text) for path, text in commands(build_parser()))
    env = {**os.environ, "COLUMNS": WIDTH}
    for path in ("", "train", "weights list"):
        res = subprocess.run([sys.executable, "-m", "ppomq.cli", *path.split(), "--help"],
                             capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert res.stdout == texts[path], path


def test_cli_reference_page_fits_80_columns():
    wide = [line for line in PAGE.read_text().splitlines() if len(line) > 80]
    assert not wide, f"{len(wide)} lines of docs/reference/cli.md are wider than 80: {wide[:3]}"
