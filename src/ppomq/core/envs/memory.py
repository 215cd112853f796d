"""Tasks that need memory: ppomq's own Gymnasium ids, registered on first use.

`ppomq/MaskedCartPole-v1`: CartPole-v1 whose observation keeps the cart's position and the
pole's angle and drops both velocities, so a policy sees where things are but not where
they are going: a feed-forward policy on one observation cannot tell a pole falling left
from one swinging back right, a recurrent one can infer the velocities from successive
observations. Dynamics, rewards, episode length (500) and the solved threshold (475) are
CartPole-v1's; the observation is float32 [x, theta].
"""

from __future__ import annotations

from typing import Any

import numpy as np

NAMESPACE = "ppomq"
MASKED_CARTPOLE = f"{NAMESPACE}/MaskedCartPole-v1"
# CartPole's observation is [x, x_dot, theta, theta_dot]; these are kept.
KEPT = (0, 2)


def make_masked_cartpole(**kwargs: Any) -> Any:
    import gymnasium as gym
    from gymnasium.wrappers import TransformObservation

    env = gym.make("CartPole-v1", **kwargs)
    low = env.observation_space.low[list(KEPT)]
    high = env.observation_space.high[list(KEPT)]
    space = gym.spaces.Box(low=low, high=high, dtype=np.float32)
    return TransformObservation(env, lambda obs: obs[list(KEPT)].astype(np.float32), space)


def register_memory_envs() -> None:
    """Register ppomq's ids with Gymnasium (idempotent)."""
    import gymnasium as gym

    if MASKED_CARTPOLE not in gym.envs.registry:
        gym.register(
            id=MASKED_CARTPOLE,
            entry_point="ppomq.core.envs.memory:make_masked_cartpole",
            max_episode_steps=None,  # CartPole-v1's own TimeLimit (500) is inside
            reward_threshold=475.0,
        )
