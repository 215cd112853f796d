"""ppomq/MaskedCartPole-v1: CartPole-v1 without its velocities, registered on first use."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from ppomq.core.envs import check_env_id, make_env
from ppomq.core.envs.memory import MASKED_CARTPOLE


def test_masked_cartpole_is_cartpole_seen_without_its_velocities():
    check_env_id(MASKED_CARTPOLE)  # registered on first use, in any process
    masked, full = make_env(MASKED_CARTPOLE), gym.make("CartPole-v1")
    assert masked.observation_space.shape == (2,)
    assert gym.spec(MASKED_CARTPOLE).reward_threshold == 475.0
    obs_m, _ = masked.reset(seed=3)
    obs_f, _ = full.reset(seed=3)
    rng = np.random.default_rng(0)
    steps = 0
    while True:
        np.testing.assert_array_equal(obs_m, obs_f[[0, 2]].astype(np.float32))
        assert obs_m.dtype == np.float32
        action = int(rng.integers(2))
        obs_m, r_m, term_m, trunc_m, _ = masked.step(action)
        obs_f, r_f, term_f, trunc_f, _ = full.step(action)
        steps += 1
        assert (r_m, term_m, trunc_m) == (r_f, term_f, trunc_f)  # the same dynamics
        if term_f or trunc_f:
            break
    assert steps > 1


def test_the_masked_env_keeps_cartpoles_time_limit():
    env = make_env(MASKED_CARTPOLE)
    env.reset(seed=0)
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        env.unwrapped.state = np.zeros(4)  # held balanced: only the time limit can end it
        _, _, terminated, truncated, _ = env.step(steps % 2)
        steps += 1
    assert truncated and not terminated and steps == 500
