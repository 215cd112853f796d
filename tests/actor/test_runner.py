"""EnvRunner: batches that match the wire spec, truncation bootstrapping, episode reports."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from ppomq.actor.reward_norm import RewardNormalizer
from ppomq.actor.runner import EnvRunner, clip_bounds
from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.core.models import build_model, model_spec_for
from ppomq.proto import ActionSpace, decode, encode


def _runner(env_id: str = "CartPole-v1", n: int = 4, t: int = 16, seed: int = 1):
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t, max_bytes=1 << 26)
    envs = make_vector_env(env_id, n, [env_seed(seed, 0, i) for i in range(n)])
    torch.manual_seed(seed)
    policy = build_model(model_spec_for(spec, hidden=[16, 16]))
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id=env_id)
    return runner, policy


def test_sampled_batch_passes_the_learners_validation():
    runner, policy = _runner()
    spec = rollout_spec_for("CartPole-v1", run_id="r", num_steps=16, max_bytes=1 << 26)
    batch = runner.sample(policy.inference(), policy_version=3, seq=0)
    frames = [bytes(memoryview(f)) for f in encode(batch)]
    got = decode(frames, spec)
    assert got.policy_version == 3
    assert got.arrays["obs"].shape == (16, 4, 4)
    np.testing.assert_array_equal(got.arrays["actions"], batch.arrays["actions"])


def test_logp_matches_the_policy_that_acted():
    runner, policy = _runner()
    batch = runner.sample(policy.inference(), policy_version=0, seq=0)
    a = batch.arrays
    logp, _, values = policy.evaluate(
        policy.preprocess(torch.from_numpy(a["obs"].reshape(-1, 4))),
        torch.from_numpy(a["actions"].reshape(-1)),
    )
    np.testing.assert_allclose(logp.detach().numpy(), a["logp"].reshape(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values.detach().numpy(), a["values"].reshape(-1), atol=1e-5)


def test_truncation_is_bootstrapped_from_the_final_observation():
    # Pendulum-v1 ends only by its 200-step time limit: every episode end is a truncation.
    runner, policy = _runner("Pendulum-v1", n=2, t=250)
    batch = runner.sample(policy.inference(), policy_version=0, seq=0)
    a = batch.arrays
    assert a["truncated"][199].all() and not a["terminated"].any()
    assert np.all(a["final_values"][199] != 0.0)
    assert np.all(a["final_values"][:199] == 0.0)
    assert batch.episodes.lengths == [200, 200]


def test_episodes_that_end_inside_a_batch_are_reported_with_their_returns():
    runner, policy = _runner(n=2, t=200)
    batch = runner.sample(policy.inference(), policy_version=0, seq=0)
    ends = int((batch.arrays["terminated"] | batch.arrays["truncated"]).sum())
    assert len(batch.episodes.returns) == ends > 0
    # CartPole pays 1 per step, so a return equals its episode's length.
    assert batch.episodes.returns == [float(n) for n in batch.episodes.lengths]


def test_env_seeds_differ_across_actors_and_envs_and_repeat_for_the_same_triple():
    seeds = {env_seed(1, a, e) for a in range(4) for e in range(8)}
    assert len(seeds) == 32
    assert env_seed(1, 2, 3) == env_seed(1, 2, 3)


@pytest.mark.parametrize("env_id", ["NoSuchEnv-v0", "cartpole"])
def test_unknown_env_id_is_a_user_error_naming_the_fix(env_id):
    from ppomq.core.errors import UsageError

    with pytest.raises(UsageError, match="--env-id"):
        make_vector_env(env_id, 1, [0])


def test_async_vectorization_steps_envs_in_subprocesses_with_the_same_contract():
    spec = rollout_spec_for("CartPole-v1", run_id="r", num_steps=8, max_bytes=1 << 26)
    envs = make_vector_env("CartPole-v1", 2, [env_seed(1, 0, i) for i in range(2)], "async")
    try:
        runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id="CartPole-v1")
        policy = build_model(model_spec_for(spec, hidden=[8]))
        batch = runner.sample(policy.inference(), policy_version=0, seq=0)
        frames = [bytes(memoryview(f)) for f in encode(batch)]
        assert decode(frames, spec).arrays["obs"].shape == (8, 2, 4)
    finally:
        envs.close()


# --------------------------------------------------------------------------- Box of any shape

LOW = np.array([[-1.0, -np.inf, 0.0], [-0.5, -2.0, -np.inf]], np.float32)
HIGH = np.array([[1.0, np.inf, 0.25], [0.5, np.inf, 3.0]], np.float32)


class _MatrixEnv(gym.Env):
    """Matrix observations [3, 2] and matrix actions [2, 3] with per-element bounds; keeps
    every action it was given, and pays their sum, so that tests can see what it got."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3, 2), np.float32)

    def __init__(self, low: np.ndarray = LOW, high: np.ndarray = HIGH):
        self.action_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.received: list[np.ndarray] = []
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.full((3, 2), 0.5, np.float32), {}

    def step(self, action):
        self.received.append(np.array(action, copy=True))
        self.t += 1
        obs = np.full((3, 2), self.t / 10, np.float32)
        return obs, float(np.sum(action)), False, False, {}


MATRIX_ENV = "ppomq-test/MatrixBox-v0"
UNBOUNDED_ENV = "ppomq-test/MatrixBoxUnbounded-v0"
UNBOUNDED = {
    "low": np.full((2, 3), -np.inf, np.float32),
    "high": np.full((2, 3), np.inf, np.float32),
}


def _register(env_id: str, entry_point: type, **kwargs) -> None:
    if env_id not in gym.envs.registry:
        gym.register(env_id, entry_point=entry_point, max_episode_steps=5, kwargs=kwargs)


_register(MATRIX_ENV, _MatrixEnv)
_register(UNBOUNDED_ENV, _MatrixEnv, **UNBOUNDED)


class _WidePolicy:
    """Gaussian-ish actions with std 5, mostly outside the box; flat [N, 6] like an MLP head
    or already [N, 2, 3]. Records the observation shapes it was given."""

    def __init__(self, flat: bool) -> None:
        self.flat = flat
        self.rng = np.random.default_rng(0)
        self.obs_shapes: list[tuple[int, ...]] = []

    def act(self, obs):
        self.obs_shapes.append(obs.shape)
        n = len(obs)
        action = self.rng.normal(0.0, 5.0, (n, 6) if self.flat else (n, 2, 3)).astype(np.float32)
        return action, np.zeros(n, np.float32), np.zeros(n, np.float32)

    def value(self, obs):
        self.obs_shapes.append(obs.shape)
        return np.ones(len(obs), np.float32)


def _matrix_runner(env_id: str, n: int = 3, t: int = 12):
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t, max_bytes=1 << 26)
    envs = make_vector_env(env_id, n, [env_seed(1, 0, i) for i in range(n)])
    return spec, envs, EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id=env_id)


@pytest.mark.parametrize(
    "flat", [True, False], ids=["policy-returns-flat", "policy-returns-matrix"]
)
def test_matrix_box_actions_reach_the_env_clipped_per_element_and_the_wire_unclipped(flat):
    spec, envs, runner = _matrix_runner(MATRIX_ENV)
    policy = _WidePolicy(flat)
    batch = runner.sample(policy, policy_version=0, seq=0)
    raw = batch.arrays["actions"]
    assert raw.shape == (12, 3, 2, 3) and raw.dtype == np.float32
    got = np.stack([np.stack(e.unwrapped.received) for e in envs.envs], axis=1)  # [T, N, 2, 3]
    np.testing.assert_array_equal(got, np.clip(raw, LOW, HIGH))
    # Infinite bounds clip nothing: those elements reach the env exactly as sampled.
    np.testing.assert_array_equal(got[..., 0, 1], raw[..., 0, 1])
    assert (np.abs(raw[..., 0, 1]) > 3).any()
    assert ((got >= LOW) & (got <= HIGH)).all()
    assert (raw != got).any()  # the wire keeps the raw sample, whose logp the ratio needs
    # Observations keep their matrix shape, on the wire and into the policy.
    assert batch.arrays["obs"].shape == (12, 3, 3, 2)
    assert set(policy.obs_shapes) >= {(3, 3, 2)}
    assert batch.arrays["truncated"][4].all() and (batch.arrays["final_values"][4] == 1).all()
    decoded = decode([bytes(memoryview(f)) for f in encode(batch)], spec)
    np.testing.assert_array_equal(decoded.arrays["actions"], raw)
    envs.close()


def test_an_unbounded_box_is_passed_to_the_env_unclipped():
    _, envs, runner = _matrix_runner(UNBOUNDED_ENV)
    assert runner.bounds is None
    batch = runner.sample(_WidePolicy(flat=True), policy_version=0, seq=0)
    got = np.stack([np.stack(e.unwrapped.received) for e in envs.envs], axis=1)
    np.testing.assert_array_equal(got, batch.arrays["actions"])
    envs.close()


def test_clip_bounds_round_float64_bounds_inward_to_float32():
    space = ActionSpace.box((3,), [-0.1, -1e300, -np.inf], [0.1, 1e300, 2.0])
    low, high = clip_bounds(space)
    assert low.dtype == high.dtype == np.float32
    assert low[0] >= -0.1 and high[0] <= 0.1  # float32(0.1) is above 0.1: one step in
    assert np.isfinite(low[1]) and np.isfinite(high[1])
    assert low[2] == -np.inf and high[2] == 2.0


# --------------------------------------------------------------------------- reward scaling


class _LeftPolicy:
    """Always pushes CartPole left: episodes of about ten steps, each paying 1 a step."""

    def act(self, obs):
        n = len(obs)
        return np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, np.float32)

    def value(self, obs):
        return np.zeros(len(obs), np.float32)


def _cartpole_runner(n: int, t: int) -> EnvRunner:
    spec = rollout_spec_for("CartPole-v1", run_id="r", num_steps=t, max_bytes=1 << 26)
    envs = make_vector_env("CartPole-v1", n, [env_seed(1, 0, i) for i in range(n)])
    return EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id="CartPole-v1")


def test_rewards_sent_are_scaled_per_env_while_reported_returns_stay_raw():
    runner = _cartpole_runner(n=3, t=60)
    assert runner.configure_rewards({"gamma": 0.9, "clip": 10.0, "epsilon": 1e-8})
    batch = runner.sample(_LeftPolicy(), policy_version=0, seq=0)
    a = batch.arrays
    # The same stream of 1s and terminations through a fresh normalizer gives the same.
    ref = RewardNormalizer(3, gamma=0.9)
    want = np.stack([ref(np.ones(3), a["terminated"][t]).copy() for t in range(60)])
    np.testing.assert_array_equal(a["rewards"], want.astype(np.float32))
    assert a["terminated"].sum() >= 6 and not np.all(a["rewards"] == 1.0)
    assert batch.episodes.returns == [float(n) for n in batch.episodes.lengths]


def test_reward_statistics_carry_across_rollouts_and_restart_when_the_config_changes():
    runner, policy = _cartpole_runner(n=2, t=8), _LeftPolicy()
    assert runner.reward_norm is None  # no config in the weights yet: raw rewards
    assert runner.configure_rewards({"gamma": 0.99, "some_later_key": 1})
    norm = runner.reward_norm
    runner.sample(policy, policy_version=1, seq=0)
    # A newer version with the same settings keeps the statistics.
    assert not runner.configure_rewards({"gamma": 0.99, "clip": 10.0})
    runner.sample(policy, policy_version=2, seq=1)
    assert runner.reward_norm is norm and norm.count == pytest.approx(16 + 1e-4)
    # Other settings: fresh statistics.
    assert runner.configure_rewards({"gamma": 0.95})
    assert runner.reward_norm is not norm and runner.reward_norm.count == pytest.approx(1e-4)
    assert runner.reward_norm.config.gamma == 0.95
    # Weights without the entry: back to raw rewards.
    assert runner.configure_rewards(None) and runner.reward_norm is None
    batch = runner.sample(policy, policy_version=3, seq=2)
    assert np.all(batch.arrays["rewards"] == 1.0)


class _ScribblingEnv(_MatrixEnv):
    """Edits the action it was given in place (some envs scale their action so)."""

    def step(self, action):
        out = super().step(action)
        action *= 0.0
        return out


SCRIBBLING_ENV = "ppomq-test/MatrixBoxScribbling-v0"
_register(SCRIBBLING_ENV, _ScribblingEnv, **UNBOUNDED)


def test_an_env_that_edits_its_action_in_place_cannot_change_the_sample_sent():
    _, envs, runner = _matrix_runner(SCRIBBLING_ENV)
    batch = runner.sample(_WidePolicy(flat=False), policy_version=0, seq=0)
    got = np.stack([np.stack(e.unwrapped.received) for e in envs.envs], axis=1)
    np.testing.assert_array_equal(batch.arrays["actions"], got)
    assert (batch.arrays["actions"] != 0).all()
    envs.close()
