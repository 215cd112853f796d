"""Reward scaling per env, as CleanRL's ppo_continuous_action does it, vectorized over N envs.

CleanRL wraps every env in `gym.wrappers.NormalizeReward(env, gamma)` and then
`gym.wrappers.TransformReward(env, lambda r: np.clip(r, -10, 10))`. `RewardNormalizer` is
that pair for N envs at once, with Gymnasium 1.4's arithmetic in Gymnasium's order
(`NormalizeReward.step` in gymnasium/wrappers/stateful_reward.py, `RunningMeanStd` in
gymnasium/wrappers/utils.py), so each env's rewards come out as its own wrapper's would.
Per env and step, with R that env's running discounted return:

    R <- R * gamma * (1 - terminated) + r
    (mean, var, count) <- the parallel-variance merge of one sample, R
    r' <- clip(r / sqrt(var + epsilon), -clip, clip)

R is zeroed only by a termination: a truncation (time limit) and the reset after it carry
it on, as in Gymnasium. The statistics start as RunningMeanStd's: mean 0, var 1, count
1e-4. Rewards are divided, never centred (openai/baselines#538).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# RunningMeanStd's initial count: a tiny prior that keeps the first update's division finite.
_RMS_INITIAL_COUNT = 1e-4


@dataclass(frozen=True, slots=True)
class RewardNormConfig:
    """The `reward_norm` entry of a weights header's `actor` map (proto/WEIGHTS.md)."""

    gamma: float
    clip: float = 10.0
    epsilon: float = 1e-8

    @classmethod
    def from_map(cls, doc: Mapping[str, Any] | None) -> RewardNormConfig | None:
        """None (raw rewards) for a missing or empty entry; keys it does not know are
        ignored, so that a newer learner may add some. A bad value is a ValueError."""
        if not doc:
            return None
        if not isinstance(doc, Mapping):
            raise ValueError(f"actor.reward_norm must be a map, got {type(doc).__name__}")
        values = {}
        for key, default in (("gamma", None), ("clip", 10.0), ("epsilon", 1e-8)):
            value = doc.get(key, default)
            if type(value) not in (int, float) or math.isnan(value):
                raise ValueError(f"actor.reward_norm.{key} must be a number, got {value!r}")
            values[key] = float(value)
        return cls(**values)

    def __post_init__(self) -> None:
        # Gymnasium's own bounds: a gamma outside [0, 1] makes R diverge or flip sign, and a
        # non-positive epsilon lets a zero variance turn rewards into inf or NaN.
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"reward_norm gamma must be in [0, 1], got {self.gamma}")
        if not self.epsilon > 0.0:
            raise ValueError(f"reward_norm epsilon must be > 0, got {self.epsilon}")
        if not self.clip > 0.0:
            raise ValueError(f"reward_norm clip must be > 0 (inf: no clip), got {self.clip}")


class RewardNormalizer:
    """Per-env running discounted return and per-env running variance of it.

    `__call__` is on the actor's step loop: every operation writes into arrays allocated
    here, so a step allocates nothing but what the caller passes in.
    """

    def __init__(
        self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8
    ) -> None:
        self.config = RewardNormConfig(float(gamma), float(clip), float(epsilon))
        self.num_envs = int(num_envs)
        cfg = self.config
        self.gamma, self.clip, self.epsilon = cfg.gamma, cfg.clip, cfg.epsilon
        self.returns = np.zeros(num_envs)  # R per env (Gymnasium's `discounted_reward`)
        self.mean = np.zeros(num_envs)
        self.var = np.ones(num_envs)
        # One count for all envs: each env adds one sample per step, so they stay equal.
        self.count = _RMS_INITIAL_COUNT
        self._delta = np.empty(num_envs)
        self._tmp = np.empty(num_envs)

    @classmethod
    def from_config(cls, num_envs: int, config: RewardNormConfig) -> RewardNormalizer:
        return cls(num_envs, config.gamma, config.clip, config.epsilon)

    def __call__(
        self, rewards: np.ndarray, terminated: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Scaled rewards [N] for one step's raw `rewards` [N] and `terminated` [N] (bool);
        written into `out` (any float dtype) when given. Updates the statistics."""
        r, mean, var, delta, tmp = self.returns, self.mean, self.var, self._delta, self._tmp
        # R = R * gamma * (1 - terminated) + reward, in that order (the same roundings;
        # zeroing where terminated is the multiplication by 0, a third cheaper)
        np.multiply(r, self.gamma, out=r)
        np.putmask(r, terminated, 0.0)
        np.add(r, rewards, out=r)
        # RunningMeanStd.update with a batch of one sample (batch mean R, batch var 0):
        #   mean += delta * 1 / total
        #   var = (var * count + 0 + delta^2 * count * 1 / total) / total
        count = self.count
        total = count + 1
        np.subtract(r, mean, out=delta)
        np.divide(delta, total, out=tmp)
        np.add(mean, tmp, out=mean)
        np.multiply(var, count, out=var)
        np.multiply(delta, delta, out=delta)
        np.multiply(delta, count, out=delta)
        np.divide(delta, total, out=delta)
        np.add(var, delta, out=var)
        np.divide(var, total, out=var)
        self.count = total
        # reward / sqrt(var + epsilon), then CleanRL's TransformReward clip
        np.add(var, self.epsilon, out=tmp)
        np.sqrt(tmp, out=tmp)
        np.divide(rewards, tmp, out=tmp)
        np.maximum(tmp, -self.clip, out=tmp)
        if out is None:
            out = np.empty(self.num_envs)
        np.minimum(tmp, self.clip, out=out)
        return out
