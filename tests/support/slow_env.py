"""An env whose steps take as long as an emulator's: MountainCar with a pause in every
step. An untrained greedy policy never reaches the flag, so each of its episodes is the
time limit's 200 steps: about STEP_S x 200 seconds, on any machine.

`--env-id tests.support.slow_env:SlowMountainCar-v0` (Gymnasium's module:id form) from the
repository root, where `python -m ppomq.cli` finds `tests`.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control import MountainCarEnv

SLOW_ENV = "tests.support.slow_env:SlowMountainCar-v0"
STEP_S = 0.005


class SlowMountainCar(MountainCarEnv):
    def step(self, action: Any) -> Any:
        time.sleep(STEP_S)
        return super().step(action)


if "SlowMountainCar-v0" not in gym.envs.registry:
    gym.register("SlowMountainCar-v0", entry_point=SlowMountainCar, max_episode_steps=200)
