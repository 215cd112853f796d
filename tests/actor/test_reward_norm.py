"""RewardNormalizer: N envs at once, exactly as N Gymnasium NormalizeReward wrappers (+ clip)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import NormalizeReward, TransformReward

from ppomq.actor.reward_norm import RewardNormalizer, RewardNormConfig


class _ScriptedEnv(gym.Env):
    """Pays the scripted rewards and ends episodes where the script says."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(1)

    def __init__(self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray):
        self.script = list(
            zip(rewards.tolist(), terminated.tolist(), truncated.tolist(), strict=True)
        )
        self.t = 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward, terminated, truncated = self.script[self.t]
        self.t += 1
        return np.zeros(1, np.float32), reward, terminated, truncated, {}


def _streams(n: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Per-env scales and offsets far apart, so that per-env statistics matter and some
    # scaled rewards reach the clip.
    scale = rng.uniform(0.01, 100.0, n)
    rewards = rng.normal(0.0, 1.0, (steps, n)) * scale + rng.normal(0.0, 5.0, n)
    rewards[: steps // 10] *= 50.0  # large early rewards: clipped while the variance is young
    terminated = rng.random((steps, n)) < 0.03
    truncated = ~terminated & (rng.random((steps, n)) < 0.03)
    return rewards, terminated, truncated


def _gymnasium_scaled(rewards, terminated, truncated, gamma, clip, epsilon) -> np.ndarray:
    """CleanRL's per-env wrappers, one env each, stepped and reset as a user would."""
    steps, n = rewards.shape
    out = np.empty((steps, n))
    for i in range(n):
        env = _ScriptedEnv(rewards[:, i], terminated[:, i], truncated[:, i])
        env = NormalizeReward(env, gamma=gamma, epsilon=epsilon)
        env = TransformReward(env, lambda r: np.clip(r, -clip, clip))
        env.reset()
        for t in range(steps):
            _, out[t, i], term, trunc, _ = env.step(0)
            if term or trunc:
                env.reset()
    return out


@pytest.mark.parametrize(
    "gamma,clip,epsilon", [(0.99, 10.0, 1e-8), (0.9, 3.0, 1e-4), (1.0, 10.0, 1e-8)]
)
def test_scaled_rewards_equal_gymnasium_normalize_reward_per_env(gamma, clip, epsilon):
    rewards, terminated, truncated = _streams(n=6, steps=400, seed=3)
    want = _gymnasium_scaled(rewards, terminated, truncated, gamma, clip, epsilon)
    norm = RewardNormalizer(6, gamma, clip, epsilon)
    got = np.stack([norm(rewards[t], terminated[t]).copy() for t in range(len(rewards))])
    assert (np.abs(want) == clip).any()  # the clip was exercised
    np.testing.assert_array_equal(got, want)  # bit for bit: the same operations in the same order


def test_truncation_carries_the_discounted_return_on_and_termination_zeroes_it():
    norm = RewardNormalizer(3, gamma=0.5)
    norm(np.array([4.0, 4.0, 4.0]), np.array([False, False, False]))
    norm(np.array([0.0, 0.0, 0.0]), np.array([True, False, False]))  # env 0 terminates
    np.testing.assert_array_equal(norm.returns, [0.0, 2.0, 2.0])


def test_scaled_rewards_are_written_into_the_callers_float32_row():
    norm = RewardNormalizer(4, gamma=0.99)
    out = np.zeros((2, 4), np.float32)
    ret = norm(np.ones(4), np.zeros(4, bool), out=out[1])
    assert ret.base is out and out[1].dtype == np.float32 and np.all(out[1] > 0)
    assert not out[0].any()


def test_config_from_the_actor_map_ignores_unknown_keys_and_refuses_bad_values():
    assert RewardNormConfig.from_map(None) is None
    assert RewardNormConfig.from_map({}) is None
    cfg = RewardNormConfig.from_map({"gamma": 0.99, "clip": 5, "future_key": [1, 2]})
    assert cfg == RewardNormConfig(gamma=0.99, clip=5.0, epsilon=1e-8)
    for bad in ({"clip": 10.0}, {"gamma": 1.5}, {"gamma": "0.9"}, {"gamma": True},
                {"gamma": 0.9, "epsilon": 0.0}, {"gamma": 0.9, "clip": -1.0}):  # fmt: skip
        with pytest.raises(ValueError, match="reward_norm"):
            RewardNormConfig.from_map(bad)
