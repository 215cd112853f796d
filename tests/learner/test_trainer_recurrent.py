"""PPOTrainer with a recurrent policy: whole env sequences from each batch's hidden_state,
episode starts applied, minibatches of whole rows; the learner's recomputed outputs are the
actor's for the same version, and updates learn."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.core.envs.memory import MASKED_CARTPOLE
from ppomq.core.models import build_model, model_spec_for
from ppomq.learner.sequences import from_rows, sequence_arrays, to_rows
from ppomq.learner.trainer import PPOConfig, PPOTrainer, flatten_arrays, gae_targets

T = 24


@pytest.fixture(autouse=True)
def one_thread():
    """The learner's own default: the LSTM's many small steps crawl on contended threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _spec(lstm_size: int = 8) -> dict:
    rollout = rollout_spec_for(MASKED_CARTPOLE, run_id="r", num_steps=T, max_bytes=1 << 24)
    return model_spec_for(rollout, arch="lstm", hidden=[16], lstm_size=lstm_size)


def _batches(policy, count: int, num_envs: int = 3, seed: int = 0) -> list:
    rollout = rollout_spec_for(MASKED_CARTPOLE, run_id="r", num_steps=T, max_bytes=1 << 24)
    seeds = [env_seed(seed, 0, i) for i in range(num_envs)]
    runner = EnvRunner(
        envs=make_vector_env(MASKED_CARTPOLE, num_envs, seeds), spec=rollout, run_id="r",
        actor_id="a", env_id=MASKED_CARTPOLE,
    )  # fmt: skip
    inference = policy.inference()
    return [runner.sample(inference, policy_version=0, seq=i) for i in range(count)]


def test_model_spec_for_lstm_wraps_the_encoder_the_observation_gets():
    spec = _spec(lstm_size=32)
    assert spec["arch"] == "lstm" and spec["encoder"] == "mlp" and spec["lstm_size"] == 32
    assert spec["hidden"] == [16] and spec["obs_shape"] == [2]
    assert build_model(spec).state_shape == (2, 32)


def test_rows_round_trip_the_flat_order_of_batches_of_different_widths():
    torch.manual_seed(0)
    policy = build_model(_spec())
    batches = _batches(policy, 1, num_envs=2) + _batches(policy, 1, num_envs=3, seed=1)
    flat = flatten_arrays(batches)
    rows = to_rows(flat["values"], batches)
    assert rows.shape == (5, T)
    np.testing.assert_array_equal(rows[3], batches[1].arrays["values"][:, 1])
    np.testing.assert_array_equal(from_rows(rows, batches), flat["values"])
    seq = sequence_arrays(batches)
    np.testing.assert_array_equal(seq["obs"][4], batches[1].arrays["obs"][:, 2])
    np.testing.assert_array_equal(seq["state"][4], batches[1].arrays["hidden_state"][2])
    ended = batches[0].arrays["terminated"] | batches[0].arrays["truncated"]
    np.testing.assert_array_equal(seq["starts"][0, 1:], ended[:-1, 0])
    assert not seq["starts"][:, 0].any()


@pytest.mark.parametrize("targets", ["gae", "vtrace"])
def test_the_first_minibatch_replays_the_actors_policy_exactly(targets):
    """Same version: every ratio is 1, so KL and clip fraction are 0 on the first step."""
    torch.manual_seed(1)
    policy = build_model(_spec())
    batches = _batches(policy, 3)
    assert any((b.arrays["terminated"] | b.arrays["truncated"]).any() for b in batches)
    trainer = PPOTrainer(
        policy=policy, config=PPOConfig(targets=targets, update_epochs=1, minibatch_size=0)
    )
    seen = []
    inner = trainer._gradient
    trainer._gradient = lambda mb, **c: seen.append(inner(mb, **c)) or seen[-1]
    stats = trainer.update(batches, 0)
    assert len(seen) == 1
    assert float(seen[0].approx_kl) == pytest.approx(0.0, abs=1e-6)
    assert float(seen[0].clip_fraction) == 0.0
    assert stats["charts/samples"] == 3 * 3 * T


def test_vtrace_evaluation_of_sequences_gives_the_actors_logp_and_values():
    torch.manual_seed(2)
    policy = build_model(_spec())
    batches = _batches(policy, 2)
    trainer = PPOTrainer(policy=policy, config=PPOConfig(targets="vtrace"))
    seq = sequence_arrays(batches)
    obs = policy.preprocess(torch.from_numpy(seq["obs"]).reshape(-1, 2)).reshape(6, T, 2)
    logp, values = trainer._evaluate_batch(
        obs, torch.from_numpy(seq["actions"]), torch.from_numpy(seq["starts"]),
        torch.from_numpy(seq["state"]),
    )  # fmt: skip
    flat = flatten_arrays(batches)
    np.testing.assert_allclose(from_rows(logp, batches), flat["logp"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(from_rows(values, batches), flat["values"], rtol=1e-5, atol=1e-6)


def _update_seeing_minibatches(trainer: PPOTrainer, batches: list) -> list:
    """One update of `trainer` on `batches`; returns every minibatch its steps saw."""
    seen = []
    inner = trainer._gradient

    def spy(mb, **coefs):
        seen.append(mb)
        return inner(mb, **coefs)

    trainer._gradient = spy
    trainer.update(batches, 0)
    return seen


def test_minibatches_are_whole_sequences_with_their_own_initial_state():
    torch.manual_seed(3)
    policy = build_model(_spec())
    batches = _batches(policy, 4)  # 12 rows of T steps
    trainer = PPOTrainer(policy=policy, config=PPOConfig(update_epochs=2, minibatch_size=4 * T))
    seq = sequence_arrays(batches)
    row_of = {seq["obs"][i].tobytes(): i for i in range(len(seq["obs"]))}
    seen = _update_seeing_minibatches(trainer, batches)
    assert len(seen) == 2 * 3  # 12 rows in minibatches of 4 rows, 2 epochs
    for mb in seen:
        assert mb.obs.shape[:2] == (4, T) and mb.state.shape == (4, 2, 8)
        for i in range(4):
            j = row_of[policy.preprocess(mb.obs[i]).numpy().tobytes()]
            np.testing.assert_array_equal(mb.state[i].numpy(), seq["state"][j])
            np.testing.assert_array_equal(mb.starts[i].numpy(), seq["starts"][j])
    rows_epoch1 = sorted(row_of[m.obs[i].numpy().tobytes()] for m in seen[:3] for i in range(4))
    assert rows_epoch1 == list(range(12))  # each epoch covers every row once


def test_updates_lengthen_cartpole_episodes():
    """Not the benchmark (benchmarks/results/masked_cartpole.md is): on CartPole, where an
    LSTM policy learns quickly, updates on fresh batches must make episodes longer: fewer
    of them end in the last batches than in the first (a policy that does not learn ends
    as many late as early)."""
    torch.manual_seed(4)
    env_id = "CartPole-v1"
    rollout = rollout_spec_for(env_id, run_id="r", num_steps=32, max_bytes=1 << 24)
    policy = build_model(model_spec_for(rollout, arch="lstm", hidden=[64], lstm_size=64))
    trainer = PPOTrainer(
        policy=policy, config=PPOConfig(anneal_lr=False, update_epochs=10, minibatch_size=128)
    )
    runner = EnvRunner(
        envs=make_vector_env(env_id, 8, [env_seed(5, 0, i) for i in range(8)]),
        spec=rollout, run_id="r", actor_id="a", env_id=env_id,
    )  # fmt: skip
    ends = []  # episodes ended per batch: at a fixed number of steps, fewer = longer
    for i in range(80):
        batch = runner.sample(policy.inference(), policy_version=i, seq=i)
        ends.append(len(batch.episodes.lengths))
        trainer.update([batch], 0)
    assert sum(ends[:10]) > 1.5 * sum(ends[-10:]), ends


def test_norm_returns_gives_each_sequence_its_own_targets_normalized():
    torch.manual_seed(4)
    policy = build_model(_spec())
    batches = _batches(policy, 2)
    config = PPOConfig(update_epochs=1, minibatch_size=2 * T, norm_returns=True)
    trainer = PPOTrainer(policy=policy, config=config)
    seq = sequence_arrays(batches)
    row_of = {seq["obs"][i].tobytes(): i for i in range(len(seq["obs"]))}
    seen = _update_seeing_minibatches(trainer, batches)
    # The actor's values are the head's normalized outputs: as returns, with the
    # statistics before the update (mean 0, var 1: the values themselves).
    _, raw = gae_targets(batches, gamma=config.gamma, lam=config.gae_lambda)
    norm = trainer.returns_norm
    assert float(norm.mean) == pytest.approx(raw.mean(), rel=1e-4)
    want = to_rows(norm.normalize(torch.from_numpy(raw)).numpy(), batches)
    for mb in seen:
        for i in range(len(mb.obs)):
            j = row_of[policy.preprocess(mb.obs[i]).numpy().tobytes()]
            np.testing.assert_allclose(mb.returns[i].numpy(), want[j], rtol=1e-5, atol=1e-6)
