"""PPOTrainer: one update moves the policy toward advantageous actions; state round-trips."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch

from ppomq.core.errors import UsageError
from ppomq.core.models import Policy, build_model
from ppomq.learner.trainer import (
    PPOConfig,
    PPOTrainer,
    flatten_batches,
    gae_targets,
    rollout_order,
    vtrace_targets,
)
from ppomq.proto import RolloutBatch

SPEC = {"arch": "mlp", "obs_shape": [3], "action": {"kind": "categorical", "n": 2},
        "hidden": [16], "activation": "tanh", "obs_norm": None}  # fmt: skip


def _batch(policy: Policy, t: int = 16, n: int = 4, seed: int = 0) -> RolloutBatch:
    """Action 1 is always rewarded, action 0 never; episodes never end."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(t, n, 3)).astype(np.float32)
    action, logp, value = policy.act(torch.from_numpy(obs.reshape(-1, 3)))
    actions = action.numpy().reshape(t, n)
    return RolloutBatch(
        run_id="r", actor_id="a", seq=seed, policy_version=0, env_id="X", num_envs=n,
        num_steps=t,
        arrays={
            "obs": obs, "actions": actions.astype(np.int64),
            "logp": logp.numpy().reshape(t, n), "values": value.numpy().reshape(t, n),
            "rewards": (actions == 1).astype(np.float32),
            "terminated": np.zeros((t, n), bool), "truncated": np.zeros((t, n), bool),
            "final_values": np.zeros((t, n), np.float32),
            "bootstrap_value": np.zeros(n, np.float32),
        },
    )  # fmt: skip


def _p_action1(policy: Policy, obs: torch.Tensor) -> float:
    logp, _, _ = policy.evaluate(obs, torch.ones(len(obs), dtype=torch.long))
    return float(logp.detach().exp().mean())


def test_an_update_makes_the_rewarded_action_more_likely():
    torch.manual_seed(0)
    policy = build_model(SPEC)
    trainer = PPOTrainer(
        policy=policy,
        config=PPOConfig(
            gamma=0.9, anneal_lr=False, learning_rate=1e-2, update_epochs=4, minibatch_size=40
        ),
    )
    probe = torch.randn(256, 3)
    before = _p_action1(policy, probe)
    for i in range(5):
        stats = trainer.update([_batch(policy, seed=i), _batch(policy, seed=100 + i)], 0)
    assert _p_action1(policy, probe) > before + 0.1
    assert stats["charts/samples"] == 128
    assert np.isfinite(stats["losses/policy_loss"])
    assert trainer.updates == 5


def test_flatten_batches_joins_time_and_env_axes_in_order():
    policy = build_model(SPEC)
    a, b = _batch(policy, t=4, n=2, seed=1), _batch(policy, t=4, n=3, seed=2)
    flat = flatten_batches([a, b], gamma=0.9, lam=0.9)
    assert flat["obs"].shape == (4 * 2 + 4 * 3, 3)
    np.testing.assert_array_equal(flat["actions"][:8], a.arrays["actions"].reshape(-1))
    np.testing.assert_array_equal(flat["obs"][8:], b.arrays["obs"].reshape(-1, 3))


def test_learning_rate_anneals_toward_zero_with_env_steps():
    policy = build_model(SPEC)
    cfg = PPOConfig(learning_rate=1e-3, anneal_lr=True, total_steps=1000, update_epochs=1)
    trainer = PPOTrainer(policy=policy, config=cfg)
    assert trainer.update([_batch(policy)], 0)["charts/learning_rate"] == 1e-3
    assert trainer.update([_batch(policy)], 500)["charts/learning_rate"] == 5e-4


def test_learning_rate_reaches_zero_at_anneal_lr_steps_when_set():
    """Sample Factory's Atari schedule: a horizon 4x the run's steps ends it at 3/4."""
    policy = build_model(SPEC)
    cfg = PPOConfig(learning_rate=1e-3, total_steps=1000, anneal_lr_steps=4000, update_epochs=1)
    trainer = PPOTrainer(policy=policy, config=cfg)
    assert trainer.update([_batch(policy)], 1000)["charts/learning_rate"] == pytest.approx(7.5e-4)
    open_ended = PPOTrainer(policy=policy, config=dataclasses.replace(cfg, total_steps=0))
    assert open_ended.update([_batch(policy)], 2000)["charts/learning_rate"] == 5e-4


def test_rollout_order_puts_each_envs_steps_together_batch_by_batch():
    policy = build_model(SPEC)
    batches = [_batch(policy, t=2, n=3), _batch(policy, t=3, n=2)]
    # Batch 0 rows: t*3 + e; batch 1 rows: 6 + t*2 + e.
    np.testing.assert_array_equal(rollout_order(batches), [0, 3, 1, 4, 2, 5, 6, 8, 10, 7, 9, 11])


def _coded_batch(policy: Policy, batch_id: int, t: int, n: int) -> RolloutBatch:
    """A batch whose observation at (step, env) is (batch_id, step, env)."""
    batch = _batch(policy, t=t, n=n, seed=batch_id)
    steps, envs = np.meshgrid(np.arange(t), np.arange(n), indexing="ij")
    batch.arrays["obs"] = np.stack([np.full((t, n), batch_id), steps, envs], axis=-1).astype(
        np.float32
    )
    return batch


def _minibatch_obs(shuffle: bool) -> list[np.ndarray]:
    """The observations of every minibatch step of one update (3 epochs of 4 minibatches
    over two batches of 8 steps x 4 envs), as (batch, step, env) rows."""
    torch.manual_seed(0)
    policy = build_model(SPEC)
    cfg = PPOConfig(update_epochs=3, minibatch_size=16, anneal_lr=False,
                    shuffle_minibatches=shuffle)  # fmt: skip
    trainer = PPOTrainer(policy=policy, config=cfg)
    seen: list[np.ndarray] = []
    inner = trainer._gradient

    def spy(mb, **coefs):
        seen.append(mb.obs.numpy().astype(int))
        return inner(mb, **coefs)

    trainer._gradient = spy
    trainer.update([_coded_batch(policy, b, t=8, n=4) for b in range(2)], 0)
    return seen


def test_unshuffled_minibatches_are_whole_env_rollouts_the_same_every_epoch():
    seen = _minibatch_obs(shuffle=False)
    assert len(seen) == 12
    for j, mb in enumerate(seen[:4]):
        batch_id, first_env = divmod(2 * j, 4)
        expected = [(batch_id, t, e) for e in (first_env, first_env + 1) for t in range(8)]
        np.testing.assert_array_equal(mb, expected)
    for epoch in (1, 2):
        for j in range(4):
            np.testing.assert_array_equal(seen[4 * epoch + j], seen[j])


def test_shuffled_minibatches_differ_from_epoch_to_epoch():
    seen = _minibatch_obs(shuffle=True)
    assert not all(np.array_equal(seen[4 + j], seen[j]) for j in range(4))


def test_state_round_trip_restores_policy_and_optimizer():
    torch.manual_seed(1)
    p1 = build_model(SPEC)
    t1 = PPOTrainer(policy=p1, config=PPOConfig(update_epochs=2, anneal_lr=False))
    t1.update([_batch(p1)], 0)
    p2 = build_model(SPEC)
    t2 = PPOTrainer(policy=p2, config=PPOConfig(update_epochs=2, anneal_lr=False))
    buf = io.BytesIO()  # through bytes, as a checkpoint file goes: no shared tensors
    torch.save(t1.get_state(), buf)
    buf.seek(0)
    t2.set_state(torch.load(buf, weights_only=False))
    assert t2.updates == 1
    for a, b in zip(p1.parameters(), p2.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    batch = _batch(p1, seed=7)
    torch.manual_seed(3)
    t1.update([batch], 0)
    torch.manual_seed(3)
    t2.update([batch], 0)
    for a, b in zip(p1.parameters(), p2.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_analytic_and_autograd_updates_land_on_the_same_parameters():
    torch.manual_seed(2)
    p1 = build_model(SPEC)
    p2 = build_model(SPEC)
    p2.load_state_dict(p1.state_dict())
    cfg = dict(update_epochs=3, minibatch_size=24, anneal_lr=False, ent_coef=0.01)
    analytic = PPOTrainer(policy=p1, config=PPOConfig(**cfg))
    autograd = PPOTrainer(policy=p2, config=PPOConfig(**cfg, gradients="autograd"))
    batches = [_batch(p1, seed=5), _batch(p1, seed=6)]
    before = torch.cat([p.detach().reshape(-1) for p in p1.parameters()])
    torch.manual_seed(9)
    s1 = analytic.update(batches, 0)
    torch.manual_seed(9)  # the same minibatch shuffles
    s2 = autograd.update(batches, 0)
    for a, b in zip(p1.parameters(), p2.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert not torch.equal(analytic.flat.data, before)  # the update did move them
    for key in ("losses/policy_loss", "losses/value_loss", "losses/approx_kl"):
        assert s1[key] == pytest.approx(s2[key], rel=1e-3, abs=1e-6)


def _twin_trainers(**cfg) -> tuple[Policy, PPOTrainer, Policy, PPOTrainer]:
    torch.manual_seed(4)
    p1, p2 = build_model(SPEC), build_model(SPEC)
    p2.load_state_dict(p1.state_dict())
    base = dict(update_epochs=2, minibatch_size=32, anneal_lr=False, gamma=0.9)
    gae = PPOTrainer(policy=p1, config=PPOConfig(**base, gae_lambda=1.0))
    vtrace = PPOTrainer(policy=p2, config=PPOConfig(**base, **cfg, targets="vtrace"))
    return p1, gae, p2, vtrace


def test_vtrace_on_fresh_batches_trains_exactly_as_gae_with_lambda_one():
    # Batches from the policy being trained: every importance weight is 1, and the current
    # values are the actor's, so V-trace's targets are GAE's with lambda = 1.
    p1, gae, p2, vtrace = _twin_trainers()
    batches = [_batch(p1, seed=11), _batch(p1, seed=12)]
    torch.manual_seed(5)
    s1 = gae.update(batches, 0)
    torch.manual_seed(5)
    s2 = vtrace.update(batches, 0)
    for a, b in zip(p1.parameters(), p2.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert s1["losses/value_loss"] == pytest.approx(s2["losses/value_loss"], rel=1e-4)


def test_vtrace_targets_use_the_current_policy_not_the_actors():
    # A stale batch: collected by an older policy. GAE trains on the actor's values and
    # V-trace on the current ones, so the two updates differ; V-trace's value loss is
    # measured against values the current network gives.
    p1, gae, p2, vtrace = _twin_trainers()
    old = build_model(SPEC)  # a different (older) policy collected the batch
    batches = [_batch(old, seed=13)]
    torch.manual_seed(6)
    gae.update(batches, 0)
    torch.manual_seed(6)
    vtrace.update(batches, 0)
    diff = max(
        float((a - b).detach().abs().max())
        for a, b in zip(p1.parameters(), p2.parameters(), strict=True)
    )
    assert diff > 1e-4


def test_kl_penalty_coefficient_adapts_after_each_update_and_survives_a_checkpoint():
    torch.manual_seed(8)
    policy = build_model(SPEC)
    cfg = PPOConfig(objective="kl-penalty", kl_penalty_target=1e-6, kl_penalty_coef=1.0,
                    update_epochs=3, anneal_lr=False, learning_rate=1e-2)  # fmt: skip
    trainer = PPOTrainer(policy=policy, config=cfg)
    stats = trainer.update([_batch(policy, seed=21)], 0)
    # A learning rate of 1e-2 moves the policy far beyond a KL of 1e-6: beta doubles.
    assert stats["charts/kl_coef"] == 1.0 and trainer.kl_coef == 2.0
    trainer.update([_batch(policy, seed=22)], 0)
    assert trainer.kl_coef == 4.0
    other = PPOTrainer(policy=build_model(SPEC), config=cfg)
    other.set_state(trainer.get_state())
    assert other.kl_coef == 4.0
    loose = PPOConfig(objective="kl-penalty", kl_penalty_target=10.0, update_epochs=1)
    relaxed = PPOTrainer(policy=build_model(SPEC), config=loose)
    relaxed.update([_batch(relaxed.policy, seed=23)], 0)
    assert relaxed.kl_coef == 0.5  # far below the target: halved
    clip = PPOTrainer(policy=build_model(SPEC), config=PPOConfig(update_epochs=1))
    assert "charts/kl_coef" not in clip.update([_batch(clip.policy)], 0)


def _scaled(batch: RolloutBatch, reward_scale: float) -> RolloutBatch:
    """`batch` with its rewards scaled and every value the actor gave zero (so the targets
    scale exactly with the rewards)."""
    a = dict(batch.arrays)
    a["rewards"] = a["rewards"] * reward_scale
    for key in ("values", "final_values", "bootstrap_value"):
        a[key] = np.zeros_like(a[key])
    return dataclasses.replace(batch, arrays=a)


def _after_one_update(batch: RolloutBatch, **cfg) -> tuple[PPOTrainer, torch.Tensor]:
    torch.manual_seed(12)
    trainer = PPOTrainer(
        policy=build_model(SPEC),
        config=PPOConfig(update_epochs=3, minibatch_size=32, anneal_lr=False, **cfg),
    )
    trainer.update([batch], 0)
    return trainer, trainer.flat.data.clone()


def test_norm_returns_makes_the_update_the_same_whatever_the_reward_scale():
    torch.manual_seed(12)
    batch = _batch(build_model(SPEC), seed=31)
    small, large = _scaled(batch, 1.0), _scaled(batch, 100.0)
    _, normalized_small = _after_one_update(small, norm_returns=True)
    trainer, normalized_large = _after_one_update(large, norm_returns=True)
    torch.testing.assert_close(normalized_small, normalized_large, rtol=1e-4, atol=1e-5)
    # Without it the value loss grows with the rewards' square and moves the weights apart.
    _, plain_small = _after_one_update(small)
    _, plain_large = _after_one_update(large)
    assert float((plain_small - plain_large).abs().max()) > 1e-2
    # The statistics are the targets' (zero values: the discounted sums of the rewards).
    _, returns = gae_targets([large], gamma=0.98, lam=0.8)
    assert float(trainer.returns_norm.mean) == pytest.approx(returns.mean(), rel=1e-4)
    assert float(trainer.returns_norm.var) == pytest.approx(returns.var(), rel=1e-4)


def test_targets_read_every_actor_value_through_the_denormalization():
    policy = build_model(SPEC)
    batch = _batch(policy, seed=32)
    a = dict(batch.arrays)
    a["truncated"] = np.zeros_like(a["truncated"])
    a["truncated"][5, 1] = True  # a time limit: its final value bootstraps the return
    a["final_values"] = np.full_like(a["final_values"], 0.5)
    a["bootstrap_value"] = np.full_like(a["bootstrap_value"], -0.25)
    batch = dataclasses.replace(batch, arrays=a)

    def denorm(v: np.ndarray) -> np.ndarray:
        return v * 3.0 + 1.0

    mapped = {**a, **{k: denorm(a[k]) for k in ("values", "final_values", "bootstrap_value")}}
    as_returns = dataclasses.replace(batch, arrays=mapped)
    adv, ret = gae_targets([batch], gamma=0.9, lam=0.95, denorm=denorm)
    want_adv, want_ret = gae_targets([as_returns], gamma=0.9, lam=0.95)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-6)
    np.testing.assert_allclose(ret, want_ret, rtol=1e-6)
    logp, values = a["logp"].reshape(-1), a["values"].reshape(-1)
    kw = dict(gamma=0.9, rho_bar=1.0, c_bar=1.0)
    got = vtrace_targets([batch], logp, values, denorm=denorm, **kw)
    want = vtrace_targets([as_returns], logp, denorm(values), **kw)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_return_statistics_survive_a_checkpoint_and_a_switched_setting_is_refused():
    torch.manual_seed(13)
    policy = build_model(SPEC)
    cfg = dict(update_epochs=2, anneal_lr=False)
    trainer = PPOTrainer(policy=policy, config=PPOConfig(norm_returns=True, **cfg))
    trainer.update([_batch(policy, seed=33)], 0)
    buf = io.BytesIO()
    torch.save(trainer.get_state(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=False)
    resumed = PPOTrainer(policy=build_model(SPEC), config=PPOConfig(norm_returns=True, **cfg))
    resumed.set_state(state)
    for name, value in trainer.returns_norm.state_dict().items():
        torch.testing.assert_close(resumed.returns_norm.state_dict()[name], value)
    with pytest.raises(UsageError, match="trained with --norm-returns"):
        PPOTrainer(policy=build_model(SPEC), config=PPOConfig(**cfg)).set_state(state)
    plain = PPOTrainer(policy=build_model(SPEC), config=PPOConfig(**cfg)).get_state()
    with pytest.raises(UsageError, match="trained without --norm-returns"):
        resumed.set_state(plain)
