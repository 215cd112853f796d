"""EnvRunner: steps N envs for T steps with the current policy and returns one batch.

No sockets here: the service shell feeds it weights and ships what `sample()` returns, so
tests and the efficiency benchmark drive it directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ppomq.actor.reward_norm import RewardNormalizer, RewardNormConfig
from ppomq.core.envs import EPISODES_IN_INFO
from ppomq.core.models import InferencePolicy
from ppomq.proto import ActionSpace, EpisodeStats, RolloutBatch, RolloutSpec


def clip_bounds(space: ActionSpace) -> tuple[np.ndarray, np.ndarray] | None:
    """float32 (low, high) of the action's shape, for clipping float32 actions; None when
    no element is bounded. A float64 bound that float32 cannot hold is rounded inward, so
    a clipped action is always inside the env's box."""
    if space.kind != "continuous" or (space.low is None and space.high is None):
        return None
    low64, high64 = space.bounds(np.float64)
    if np.isinf(low64).all() and np.isinf(high64).all():
        return None
    with np.errstate(over="ignore"):  # beyond float32's range: inf, then one step in
        low, high = low64.astype(np.float32), high64.astype(np.float32)
    low = np.where(low < low64, np.nextafter(low, np.float32(np.inf)), low)
    high = np.where(high > high64, np.nextafter(high, np.float32(-np.inf)), high)
    return low, high


def raw_scores(info: Mapping[str, Any], n: int) -> np.ndarray:
    """Each env's raw score of this step from `info["score"]` (ppomq.core.envs.atari's and the
    EnvPool backend's, before reward clipping), found for an env that ended this step in
    `info["final_info"]`, where a SAME_STEP vector env puts that step's info."""
    out = np.zeros(n, dtype=np.float32)
    for where in (info, info.get("final_info") or {}):
        if "score" in where:
            mask = where.get("_score", np.ones(n, dtype=bool))
            out[mask] = np.asarray(where["score"], dtype=np.float32)[mask]
    return out


def game_over(info: Mapping[str, Any], n: int) -> np.ndarray:
    """Which envs' games ended this step: the whole-game episodes that Gymnasium's
    RecordEpisodeStatistics (below episodic life) reports in `final_info`."""
    final = info.get("final_info") or {}
    return np.asarray(final.get("_episode", np.zeros(n, dtype=bool)), dtype=bool)


class EnvRunner:
    """Owns a vector env, the per-env episode counters and reward statistics across rollouts."""

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
        # An env that says so (ppomq.core.envs.atari's training pipeline) reports its own
        # episodes, whole games with raw scores, in info["final_info"]["episode"]: its done
        # flags end training episodes (a lost life) and its rewards are clipped, so neither
        # is counted.
        self.episodes_in_info = bool((getattr(envs, "metadata", None) or {}).get(EPISODES_IN_INFO))
        space = spec.action
        self.continuous = space.kind == "continuous"
        # A model may return a Box action flat ([N, prod(A)]); the wire and the env want
        # [N, *A].
        self.action_shape = (self.num_envs, *space.shape) if self.continuous else (self.num_envs,)
        self.bounds = clip_bounds(space)
        # What the env gets of a Box action: one buffer, rewritten every step (an env
        # consumes its action inside step(); AsyncVectorEnv copies it to its worker). Never
        # a view of the wire's array, so an env that edits its action in place cannot
        # change the sample whose logp is sent.
        self._env_action = np.empty(self.action_shape, np.float32) if self.continuous else None
        self.reward_norm: RewardNormalizer | None = None
        self.env_steps = 0
        # A recurrent policy's per-env state [N, *H], carried from rollout to rollout and
        # across versions, and where an episode starts at the next step (the state is zeroed
        # there before that step's input goes in). None until a recurrent policy acts.
        self.rnn_state: np.ndarray | None = None
        self.rnn_starts = np.ones(self.num_envs, dtype=bool)

    def configure_rewards(self, reward_norm: Mapping[str, Any] | None) -> bool:
        """Scale the rewards sent from now on as the weights header's `actor.reward_norm`
        says (None or {}: raw rewards). The statistics carry over rollouts and versions
        while the configuration stays the same; a different one starts them afresh.
        Returns whether anything changed."""
        config = RewardNormConfig.from_map(reward_norm)
        if config == (self.reward_norm.config if self.reward_norm is not None else None):
            return False
        self.reward_norm = (
            None if config is None else RewardNormalizer.from_config(self.num_envs, config)
        )
        return True

    def _rnn_state_for(self, policy: Any) -> np.ndarray:
        """The carried state, or a fresh one if none fits this policy's state shape."""
        shape = (self.num_envs, *policy.state_shape)
        if self.rnn_state is None or self.rnn_state.shape != shape:
            self.rnn_state = policy.initial_state(self.num_envs)
            self.rnn_starts[:] = True
        return self.rnn_state.copy()

    def sample(self, policy: InferencePolicy, *, policy_version: int, seq: int) -> RolloutBatch:
        """One rollout of T steps; arrays are fresh (ZeroMQ may still hold the last ones)."""
        buf = self._buffers()
        memory = self._memory_for(policy) if getattr(policy, "recurrent", False) else None
        for t in range(self.spec.num_steps):
            terminated, truncated, info = self._step(policy, buf, t, memory)
            done = terminated | truncated
            if memory is not None:
                memory.starts = done.copy()  # the next observation begins a new episode there
            if done.any():
                self._end_episodes(policy, buf, t, done, terminated, truncated, info, memory)
        return self._batch(policy, buf, memory, policy_version=policy_version, seq=seq)

    def _buffers(self) -> _Rollout:
        t_steps, n = self.spec.num_steps, self.num_envs
        act_shape = (t_steps, n, *self.spec.action.shape) if self.continuous else (t_steps, n)
        rewards = np.empty((t_steps, n), dtype=np.float32)
        # What the episode figures are summed from, and where they end (ROLLOUT.md
        # "Episodes"): sent only where they differ from the rewards and the done flags.
        scored = self.reward_norm is not None or self.episodes_in_info
        return _Rollout(
            obs=np.empty((t_steps, n, *self.spec.obs_shape), dtype=self.obs_dtype),
            actions=np.empty(act_shape, dtype=np.float32 if self.continuous else np.int64),
            logp=np.empty((t_steps, n), dtype=np.float32),
            values=np.empty((t_steps, n), dtype=np.float32),
            rewards=rewards,
            scores=np.empty((t_steps, n), dtype=np.float32) if scored else rewards,
            episode_ends=np.zeros((t_steps, n), dtype=bool) if self.episodes_in_info else None,
            terminated=np.empty((t_steps, n), dtype=bool),
            truncated=np.empty((t_steps, n), dtype=bool),
            final_values=np.zeros((t_steps, n), dtype=np.float32),
            scored=scored,
        )

    def _memory_for(self, policy: Any) -> _Memory:
        """A recurrent policy's state for this rollout; the batch's hidden_state is each
        env's state at step 0, episode starts applied."""
        state = self._rnn_state_for(policy)
        state[self.rnn_starts] = 0.0
        return _Memory(state=state, hidden0=state.copy(), starts=np.zeros(self.num_envs, bool))

    def _step(
        self, policy: Any, buf: _Rollout, t: int, memory: _Memory | None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Act on the current observations and step every env once, into row `t`."""
        buf.obs[t] = self.next_obs
        if memory is not None:
            act_np, buf.logp[t], buf.values[t], memory.state = policy.act(
                buf.obs[t], memory.starts, memory.state
            )
        else:
            act_np, buf.logp[t], buf.values[t] = policy.act(buf.obs[t])
        buf.actions[t] = act_np.reshape(self.action_shape)
        if self.continuous:
            env_action = self._env_action
            if self.bounds is not None:
                # The wire carries the raw sample (its logp is what the ratio needs); only
                # the env sees it clipped, each element to its own bounds. (maximum/minimum
                # into one buffer: np.clip's dispatch costs more than the arithmetic at
                # these sizes, and nothing is allocated.)
                np.maximum(buf.actions[t], self.bounds[0], out=env_action)
                np.minimum(env_action, self.bounds[1], out=env_action)
            else:
                np.copyto(env_action, buf.actions[t])
            act_np = env_action
        # With copy=False vector envs, `obs` is the env's own buffer, overwritten by the next
        # step: it is copied into the rollout at the top of the next step, first.
        obs, reward, terminated, truncated, info = self.envs.step(act_np)
        if self.reward_norm is not None:
            self.reward_norm(reward, terminated, out=buf.rewards[t])
        else:
            buf.rewards[t] = reward
        if self.episodes_in_info:
            buf.scores[t] = raw_scores(info, self.num_envs)
        elif buf.scored:
            buf.scores[t] = reward
        buf.terminated[t] = terminated
        buf.truncated[t] = truncated
        self.next_obs = np.asarray(obs, dtype=self.obs_dtype)
        # The float32 values sent, summed as the learner sums them: its own figures and
        # these claims agree exactly (learner/episodes.py).
        self.episode_return += buf.scores[t]
        self.episode_length += 1
        return terminated, truncated, info

    def _end_episodes(
        self,
        policy: Any,
        buf: _Rollout,
        t: int,
        done: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        info: dict[str, Any],
        memory: _Memory | None,
    ) -> None:
        """Record the episodes that ended at step `t`, and bootstrap the truncated ones."""
        ended = done
        if buf.episode_ends is not None:  # whole games: a lost life is no end here
            ended = buf.episode_ends[t] = done & game_over(info, self.num_envs)
        for i in np.flatnonzero(ended):
            buf.returns.append(float(self.episode_return[i]))
            buf.lengths.append(int(self.episode_length[i]))
        self.episode_return[ended] = 0.0
        self.episode_length[ended] = 0
        # Time-limit truncation is not termination: bootstrap from the value of the final
        # observation (Pardo et al. 2018, "Time Limits in RL").
        cut = np.flatnonzero(truncated & ~terminated)
        if not cut.size:
            return
        final_obs = np.stack([info["final_obs"][i] for i in cut]).astype(self.obs_dtype, copy=False)
        if memory is not None:  # the final observation, from the episode's own state
            buf.final_values[t, cut] = policy.value(
                final_obs, np.zeros(cut.size, dtype=bool), memory.state[cut]
            )
        else:
            buf.final_values[t, cut] = policy.value(final_obs)

    def _batch(
        self, policy: Any, buf: _Rollout, memory: _Memory | None, *, policy_version: int, seq: int
    ) -> RolloutBatch:
        """The rollout as a batch, with the value to bootstrap its last step from."""
        extra: dict[str, np.ndarray] = {}
        if buf.scored:
            extra["scores"] = buf.scores
        if buf.episode_ends is not None:
            extra["episode_ends"] = buf.episode_ends
        if memory is not None:
            bootstrap_value = policy.value(self.next_obs, memory.starts, memory.state)
            self.rnn_state, self.rnn_starts = memory.state, memory.starts
            extra["hidden_state"] = memory.hidden0
        else:
            bootstrap_value = policy.value(self.next_obs)
        t_steps, n = self.spec.num_steps, self.num_envs
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
                "obs": buf.obs,
                "actions": buf.actions,
                "logp": buf.logp,
                "values": buf.values,
                "rewards": buf.rewards,
                "terminated": buf.terminated,
                "truncated": buf.truncated,
                "final_values": buf.final_values,
                "bootstrap_value": bootstrap_value.astype(np.float32, copy=False),
                **extra,
            },
            episodes=EpisodeStats(buf.returns, buf.lengths),
        )


@dataclass
class _Rollout:
    """One rollout's arrays [T, N, ...] as they fill, and the episodes that ended in it."""

    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    scores: np.ndarray  # the rewards themselves unless `scored`
    episode_ends: np.ndarray | None  # whole games only
    terminated: np.ndarray
    truncated: np.ndarray
    final_values: np.ndarray
    scored: bool
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)


@dataclass
class _Memory:
    """A recurrent policy's per-env state through one rollout."""

    state: np.ndarray
    hidden0: np.ndarray
    starts: np.ndarray
