"""EnvRunner: batches that match the wire spec, truncation bootstrapping, episode reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppomq.actor.runner import EnvRunner
from ppomq.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.policy import ActorCritic, InferencePolicy, model_spec_for
from ppomq.proto import decode, encode


def _runner(env_id: str = "CartPole-v1", n: int = 4, t: int = 16, seed: int = 1):
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t, max_bytes=1 << 26)
    envs = make_vector_env(env_id, n, [env_seed(seed, 0, i) for i in range(n)])
    torch.manual_seed(seed)
    policy = ActorCritic(model_spec_for(spec, [16, 16]))
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id=env_id)
    return runner, policy


def test_sampled_batch_passes_the_learners_validation():
    runner, policy = _runner()
    spec = rollout_spec_for("CartPole-v1", run_id="r", num_steps=16, max_bytes=1 << 26)
    batch = runner.sample(InferencePolicy(policy), policy_version=3, seq=0)
    frames = [bytes(memoryview(f)) for f in encode(batch)]
    got = decode(frames, spec)
    assert got.policy_version == 3
    assert got.arrays["obs"].shape == (16, 4, 4)
    np.testing.assert_array_equal(got.arrays["actions"], batch.arrays["actions"])


def test_logp_matches_the_policy_that_acted():
    runner, policy = _runner()
    batch = runner.sample(InferencePolicy(policy), policy_version=0, seq=0)
    a = batch.arrays
    logp, _, values = policy.evaluate(
        torch.from_numpy(a["obs"].reshape(-1, 4)), torch.from_numpy(a["actions"].reshape(-1))
    )
    np.testing.assert_allclose(logp.detach().numpy(), a["logp"].reshape(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values.detach().numpy(), a["values"].reshape(-1), atol=1e-5)


def test_truncation_is_bootstrapped_from_the_final_observation():
    # Pendulum-v1 ends only by its 200-step time limit: every episode end is a truncation.
    runner, policy = _runner("Pendulum-v1", n=2, t=250)
    batch = runner.sample(InferencePolicy(policy), policy_version=0, seq=0)
    a = batch.arrays
    assert a["truncated"][199].all() and not a["terminated"].any()
    assert np.all(a["final_values"][199] != 0.0)
    assert np.all(a["final_values"][:199] == 0.0)
    assert batch.episodes.lengths == [200, 200]


def test_episodes_that_end_inside_a_batch_are_reported_with_their_returns():
    runner, policy = _runner(n=2, t=200)
    batch = runner.sample(InferencePolicy(policy), policy_version=0, seq=0)
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
    from ppomq.errors import UsageError

    with pytest.raises(UsageError, match="--env-id"):
        make_vector_env(env_id, 1, [0])


def test_async_vectorization_steps_envs_in_subprocesses_with_the_same_contract():
    spec = rollout_spec_for("CartPole-v1", run_id="r", num_steps=8, max_bytes=1 << 26)
    envs = make_vector_env("CartPole-v1", 2, [env_seed(1, 0, i) for i in range(2)], "async")
    try:
        runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id="CartPole-v1")
        policy = ActorCritic(model_spec_for(spec, [8]))
        batch = runner.sample(InferencePolicy(policy), policy_version=0, seq=0)
        frames = [bytes(memoryview(f)) for f in encode(batch)]
        assert decode(frames, spec).arrays["obs"].shape == (8, 2, 4)
    finally:
        envs.close()
