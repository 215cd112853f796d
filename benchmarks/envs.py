"""Synthetic environments for the benchmarks, registered with Gymnasium on import.

`ppomq-bench/SleepEnv-v0` stands for an env whose step waits on something outside the
process (a simulator over RPC, a robot, a game server): each `step` sleeps a fixed time and
does almost no CPU work. With it, the scaling benchmark measures ppomq's coordination cost
(transport, weight fetches, the learner's intake) rather than the CPU of a 2-core machine.

Actor and learner processes reach it through Gymnasium's "module:EnvId" syntax:

    ppomq train --env-id benchmarks.envs:ppomq-bench/SleepEnv-v0 --target-return 1e9

(`ppomq.core.envs.check_env_id` imports the module before looking the id up; pass
`--target-return` because the learner looks the solve threshold up by the bare id.)
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

SLEEP_ENV_ID = "ppomq-bench/SleepEnv-v0"
# What `--env-id` takes so that a fresh process (an actor, the learner) registers it first.
SLEEP_ENV_SPEC = f"benchmarks.envs:{SLEEP_ENV_ID}"
# Seconds each step sleeps, read when this module registers the env: an environment
# variable because actors build the env by id alone (ppomq's launcher passes the
# environment on, minus PPOMQ_* variables, hence not a PPOMQ_ name).
STEP_S_VAR = "BENCH_SLEEP_STEP_S"
DEFAULT_STEP_S = 0.002


class SleepEnv(gym.Env[np.ndarray, np.int64]):
    """Observation f32[4], two actions, reward 1 per step; `step` sleeps `step_s` seconds.

    Episodes end (terminated) after `episode_steps` steps so that the runner's episode
    bookkeeping and autoreset paths run as they do for a real env.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def __init__(self, step_s: float = 0.002, episode_steps: int = 200) -> None:
        self.step_s = float(step_s)
        self.episode_steps = int(episode_steps)
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._obs = np.zeros(4, dtype=np.float32)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._obs = self.np_random.uniform(-0.05, 0.05, size=4).astype(np.float32)
        return self._obs.copy(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        # The point of this env: wall time passes, the CPU is free for other processes.
        time.sleep(self.step_s)
        self._t += 1
        self._obs[int(action) % 4] = self._t / self.episode_steps
        return self._obs.copy(), 1.0, self._t >= self.episode_steps, False, {}


if SLEEP_ENV_ID not in gym.envs.registry:
    gym.register(
        id=SLEEP_ENV_ID,
        entry_point=SleepEnv,
        kwargs={"step_s": float(os.environ.get(STEP_S_VAR, DEFAULT_STEP_S))},
    )
