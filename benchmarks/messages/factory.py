"""Valid rollout batches and specs for tests and benchmarks: discrete, continuous and recurrent."""

from __future__ import annotations

import numpy as np

from ppomq.proto import ActionSpace, EpisodeStats, RolloutBatch, RolloutSpec, encode

RUN_ID = "run-1"
ENV_ID = "Test-v0"


def make_spec(
    kind: str = "discrete",
    *,
    t: int = 4,
    n: int = 2,
    obs_shape: tuple[int, ...] = (3,),
    obs_dtype: str = "float32",
    recurrent: bool = False,
    max_bytes: int = 256 << 10,
    num_actions: int = 3,
) -> RolloutSpec:
    if kind == "discrete":
        action = ActionSpace("discrete", n=num_actions)
    else:
        action = ActionSpace.box((2,), -1.0, 1.0, enforce_bounds=True)
    return RolloutSpec(
        run_id=RUN_ID,
        obs_shape=obs_shape,
        obs_dtype=obs_dtype,
        action=action,
        num_steps=t,
        num_envs=n,
        env_id=ENV_ID,
        hidden_shape=(5,) if recurrent else None,
        max_bytes=max_bytes,
    )


def make_batch(
    spec: RolloutSpec,
    rng: np.random.Generator,
    *,
    seq: int = 0,
    actor_id: str = "actor-0",
    n: int | None = None,
    bootstrap_obs: bool = False,
) -> RolloutBatch:
    """A valid batch for `spec` with random contents."""
    n = n if n is not None else (spec.num_envs or 2)
    t = spec.num_steps
    obs_shape = (t, n, *spec.obs_shape)
    if np.dtype(spec.obs_dtype).kind == "f":
        obs = rng.standard_normal(obs_shape).astype(spec.obs_dtype)
    else:
        obs = rng.integers(0, 2, obs_shape).astype(spec.obs_dtype)
    if spec.action.kind == "discrete":
        actions = rng.integers(0, spec.action.n, (t, n), dtype=np.int64)
    else:
        actions = rng.uniform(-1, 1, (t, n, *spec.action.shape)).astype(np.float32)
    f32 = np.float32
    arrays = {
        "obs": obs,
        "actions": actions,
        "logp": rng.standard_normal((t, n)).astype(f32),
        "values": rng.standard_normal((t, n)).astype(f32),
        "rewards": rng.standard_normal((t, n)).astype(f32),
        "terminated": rng.random((t, n)) < 0.1,
        "truncated": rng.random((t, n)) < 0.1,
        "final_values": rng.standard_normal((t, n)).astype(f32),
        "bootstrap_value": rng.standard_normal(n).astype(f32),
    }
    if bootstrap_obs:
        arrays["bootstrap_obs"] = obs[-1].copy()
    if spec.hidden_shape is not None:
        arrays["hidden_state"] = rng.standard_normal((n, *spec.hidden_shape)).astype(f32)
    k = int(rng.integers(0, min(3, t * n + 1)))
    episodes = EpisodeStats(
        [float(x) for x in rng.standard_normal(k)], [int(x) for x in rng.integers(1, 500, k)]
    )
    return RolloutBatch(
        run_id=spec.run_id,
        actor_id=actor_id,
        seq=seq,
        policy_version=int(rng.integers(0, 100)),
        env_id=spec.env_id or ENV_ID,
        num_envs=n,
        num_steps=t,
        arrays=arrays,
        episodes=episodes,
        created_ns=1_700_000_000_000_000_000 + seq,
    )


def whole_episodes(batch: RolloutBatch, episode_return: float | None = None) -> RolloutBatch:
    """`batch` made honest about its episodes, as the learner's episode book checks them:
    every env's episode fills the batch (it ends at the last step, nowhere else), and the
    header claims each one's summed rewards over T steps (each reward `episode_return / T`
    when given). Whatever the learner saw of the actor before, it agrees."""
    a = batch.arrays
    t, n = batch.num_steps, batch.num_envs
    if episode_return is not None:
        a["rewards"] = np.full((t, n), episode_return / t, dtype=np.float32)
    a["terminated"] = np.zeros((t, n), dtype=bool)
    a["terminated"][-1] = True
    a["truncated"] = np.zeros((t, n), dtype=bool)
    totals = np.zeros(n)
    for step in range(t):  # summed as the actor and the learner sum them
        totals += a["rewards"][step]
    batch.episodes = EpisodeStats([float(x) for x in totals], [t] * n)
    return batch


def wire(batch: RolloutBatch) -> list[bytes]:
    """The batch's frames as plain bytes, as a copying receive would give them."""
    return [f.tobytes() if isinstance(f, np.ndarray) else bytes(f) for f in encode(batch)]
