"""`--preset` and `ppomq presets` through the real command line, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ppomq.cli import COMMAND_MODULES, build_parser


def _ppomq(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "ppomq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["train", "--preset", "go"], {}),
        (["learner"], {"PPOMQ_PRESET": "go"}),
        (["actor", "--preset", "go"], {}),
    ],
)
def test_unknown_preset_exits_2_with_one_line_listing_the_presets(args, env):
    res = _ppomq(*args, **env)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("ppomq: error: unknown preset 'go'")
    assert "cartpole" in lines[0] and "mujoco" in lines[0] and "atari" in lines[0]


def test_presets_lists_each_preset_with_its_source():
    res = _ppomq("presets")
    assert res.returncode == 0, res.stderr
    rows = dict(line.split(None, 1) for line in res.stdout.splitlines())
    assert {"cartpole", "mujoco", "atari"} <= set(rows)
    assert "CleanRL" in rows["mujoco"] and "rl-baselines3-zoo" in rows["cartpole"]
    assert "CleanRL" in rows["atari"]


def test_presets_name_prints_the_toml_file_and_a_bad_name_is_exit_2():
    res = _ppomq("presets", "mujoco")
    assert res.returncode == 0, res.stderr
    assert 'env_id = "HalfCheetah-v5"' in res.stdout and "ppo_continuous_action" in res.stdout
    bad = _ppomq("presets", "go")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "atari, cartpole, mujoco" in bad.stderr


def test_every_command_module_registers_a_command():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMAND_MODULES)
