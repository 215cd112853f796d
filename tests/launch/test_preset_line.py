"""`ppomq train`'s first line names the preset and, when it was picked from the env's
spaces (`--preset auto`), what in them chose it; picking reads the spaces from one env."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.envs.classic_control import CartPoleEnv

from ppomq.core.settings import TrainSettings, load_settings
from ppomq.launch.supervisor import Launcher
from ppomq.launch.train import first_line

COUNTED = "ppomq-test/CountedCartPole-v0"


class _Counted(CartPoleEnv):
    """CartPole that counts how often it is made."""

    made = 0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        type(self).made += 1


if COUNTED not in gym.envs.registry:
    gym.register(COUNTED, entry_point=_Counted, max_episode_steps=500)


@pytest.fixture(autouse=True)
def _no_ppomq_env(monkeypatch):
    for key in [k for k in os.environ if k.startswith("PPOMQ_")]:
        monkeypatch.delenv(key)


def test_the_first_line_says_which_preset_was_picked_and_why():
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    pong = load_settings(TrainSettings, {"env_id": "ALE/Pong-v5"})
    line = first_line(pong, Path("runs/x"), "CURVE")
    assert line.startswith(
        "ppomq train: ALE/Pong-v5, preset atari, picked for its uint8 image observations "
        "(4, 84, 84) (--preset NAME to choose), async mode, 2 actor(s), 10,000,000 env steps;"
    ), line
    cartpole = first_line(load_settings(TrainSettings, {}), Path("runs/x"), "CURVE")
    assert "preset none (the built-in defaults), picked for its float32 observations (4,) " \
        "with 2 discrete actions" in cartpole  # fmt: skip
    named = load_settings(TrainSettings, {"env_id": "ALE/Pong-v5", "preset": "none"})
    assert "ALE/Pong-v5, preset none (the built-in defaults), async" in first_line(
        named, Path("runs/x"), "CURVE"
    )


def test_picking_the_preset_makes_the_env_once_for_settings_first_line_and_launcher(
    tmp_path,
):
    """The launcher also reads the env's spaces, to fail in one line before anything
    starts: after the pick it asks the pick again, which makes no second env."""
    before = _Counted.made
    settings = load_settings(TrainSettings, {"env_id": COUNTED, "run_dir": str(tmp_path / "r")})
    assert _Counted.made == before + 1
    first_line(settings, tmp_path, "CURVE")
    launcher = Launcher(settings)
    try:
        assert _Counted.made == before + 1
        assert launcher.s.preset == "none"  # what the children are given: the pick's name
    finally:
        launcher.discard_if_unused()
