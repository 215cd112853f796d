"""EnvRunner: steps N envs for T steps with the current policy and returns one batch.

No sockets here: the service shell feeds it weights and ships what `sample()` returns, so
tests and the efficiency benchmark drive it directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ppomq.policy import InferencePolicy
from ppomq.proto import EpisodeStats, RolloutBatch, RolloutSpec


class EnvRunner:
    """Owns a vector env and the per-env episode counters across rollouts."""

    def __init__(
        self, *, envs: Any, spec: RolloutSpec, run_id: str, actor_id: str, env_id: str
    ) -> None:
        self.envs = envs
        self.spec = spec
        self.run_id = run_id
        self.actor_id = actor_id
        self.env_id = env_id
        self.num_envs = int(envs.num_envs)
        self.obs_dtype = np.dtype(spec.obs_dtype)
        obs, _ = envs.reset()  # seeded by make_vector_env; this reset keeps those seeds' stream
        self.next_obs = np.asarray(obs, dtype=self.obs_dtype)
        self.episode_return = np.zeros(self.num_envs, dtype=np.float64)
        self.episode_length = np.zeros(self.num_envs, dtype=np.int64)
        space = spec.action
        self.continuous = space.kind == "continuous"
        self.act_low = space.low
        self.act_high = space.high
        self.env_steps = 0

    def sample(self, policy: InferencePolicy, *, policy_version: int, seq: int) -> RolloutBatch:
        """One rollout of T steps; arrays are fresh (ZeroMQ may still hold the last ones)."""
        t_steps, n = self.spec.num_steps, self.num_envs
        obs_buf = np.empty((t_steps, n, *self.spec.obs_shape), dtype=self.obs_dtype)
        if self.continuous:
            act_buf = np.empty((t_steps, n, *self.spec.action.shape), dtype=np.float32)
        else:
            act_buf = np.empty((t_steps, n), dtype=np.int64)
        logp_buf = np.empty((t_steps, n), dtype=np.float32)
        value_buf = np.empty((t_steps, n), dtype=np.float32)
        reward_buf = np.empty((t_steps, n), dtype=np.float32)
        term_buf = np.empty((t_steps, n), dtype=bool)
        trunc_buf = np.empty((t_steps, n), dtype=bool)
        final_values = np.zeros((t_steps, n), dtype=np.float32)
        returns: list[float] = []
        lengths: list[int] = []

        for t in range(t_steps):
            obs_buf[t] = self.next_obs
            act_np, logp_buf[t], value_buf[t] = policy.act(obs_buf[t])
            act_buf[t] = act_np
            if self.continuous:
                # The wire carries the raw sample (its logp is what the ratio needs);
                # only the env sees it clipped to the box.
                act_np = np.clip(act_np, self.act_low, self.act_high)
            # With copy=False vector envs, `obs` is the env's own buffer, overwritten by the
            # next step: it is copied into obs_buf at the top of the next iteration, first.
            obs, reward, terminated, truncated, info = self.envs.step(act_np)
            reward_buf[t] = reward
            term_buf[t] = terminated
            trunc_buf[t] = truncated
            self.next_obs = np.asarray(obs, dtype=self.obs_dtype)

            self.episode_return += reward
            self.episode_length += 1
            done = terminated | truncated
            if done.any():
                for i in np.flatnonzero(done):
                    returns.append(float(self.episode_return[i]))
                    lengths.append(int(self.episode_length[i]))
                self.episode_return[done] = 0.0
                self.episode_length[done] = 0
                # Time-limit truncation is not termination: bootstrap from the value of the
                # final observation (Pardo et al. 2018, "Time Limits in RL").
                cut = np.flatnonzero(truncated & ~terminated)
                if cut.size:
                    final_obs = np.stack([info["final_obs"][i] for i in cut]).astype(
                        self.obs_dtype, copy=False
                    )
                    final_values[t, cut] = policy.value(final_obs)

        bootstrap_value = policy.value(self.next_obs)
        self.env_steps += t_steps * n
        return RolloutBatch(
            run_id=self.run_id,
            actor_id=self.actor_id,
            seq=seq,
            policy_version=policy_version,
            env_id=self.env_id,
            num_envs=n,
            num_steps=t_steps,
            arrays={
                "obs": obs_buf,
                "actions": act_buf,
                "logp": logp_buf,
                "values": value_buf,
                "rewards": reward_buf,
                "terminated": term_buf,
                "truncated": trunc_buf,
                "final_values": final_values,
                "bootstrap_value": bootstrap_value.astype(np.float32, copy=False),
            },
            episodes=EpisodeStats(returns, lengths),
        )
