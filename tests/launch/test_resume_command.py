"""The command `ppomq train` prints to go on with a run it stopped before its end."""

from __future__ import annotations

import shlex
from pathlib import Path

from ppomq.launch.train import resume_command


def test_the_resume_command_is_the_one_given_with_the_run_dir_it_made():
    argv = ["/opt/x/bin/not-on-path/ppomq", "train", "--total-steps", "300000", "--seed", "3"]
    cmd = resume_command(argv, Path("runs/cartpole-v1-1"))
    assert shlex.split(cmd) == [*argv, "--run-dir", "runs/cartpole-v1-1"]


def test_a_run_dir_given_is_given_once_in_either_spelling():
    for given in (["--run-dir", "runs/a"], ["--run-dir=runs/a"]):
        cmd = resume_command(["x/cli.py", "train", *given, "--actors", "4"], Path("runs/a"))
        assert cmd == "ppomq train --actors 4 --run-dir runs/a"


def test_a_run_dir_with_spaces_is_quoted_for_the_shell():
    cmd = resume_command(["x/cli.py", "train"], Path("my runs/a"))
    assert shlex.split(cmd)[-1] == "my runs/a"
