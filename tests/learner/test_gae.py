"""compute_gae against a scalar-loop reference, plus the episode-boundary cases by name."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppomq.learner.gae import compute_gae


def reference_gae(
    rewards, values, terminated, truncated, final_values, bootstrap_value, gamma, lam
):
    """The definition, one env and one step at a time, in float64."""
    num_steps, num_envs = values.shape
    advantages = np.zeros((num_steps, num_envs), dtype=np.float64)
    for n in range(num_envs):
        next_advantage = 0.0
        for t in reversed(range(num_steps)):
            if terminated[t, n]:
                next_value = 0.0
            elif truncated[t, n]:
                next_value = float(final_values[t, n])
            elif t == num_steps - 1:
                next_value = float(bootstrap_value[n])
            else:
                next_value = float(values[t + 1, n])
            delta = float(rewards[t, n]) + gamma * next_value - float(values[t, n])
            if terminated[t, n] or truncated[t, n]:
                next_advantage = 0.0
            next_advantage = delta + gamma * lam * next_advantage
            advantages[t, n] = next_advantage
    return advantages, advantages + values.astype(np.float64)


def make_batch(rng, num_steps, num_envs, p_term=0.1, p_trunc=0.1):
    f32 = np.float32
    return dict(
        rewards=rng.normal(size=(num_steps, num_envs)).astype(f32),
        values=rng.normal(size=(num_steps, num_envs)).astype(f32),
        terminated=rng.random((num_steps, num_envs)) < p_term,
        truncated=rng.random((num_steps, num_envs)) < p_trunc,
        final_values=rng.normal(size=(num_steps, num_envs)).astype(f32),
        bootstrap_value=rng.normal(size=num_envs).astype(f32),
    )


def no_dones(num_steps, num_envs):
    return np.zeros((num_steps, num_envs), dtype=bool)


@settings(max_examples=150, deadline=None)
@given(
    num_steps=st.integers(1, 40),
    num_envs=st.integers(1, 6),
    p_term=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    p_trunc=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    gamma=st.floats(0.0, 1.0),
    lam=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_scalar_reference_for_random_shapes_and_done_patterns(
    num_steps, num_envs, p_term, p_trunc, gamma, lam, seed
):
    batch = make_batch(np.random.default_rng(seed), num_steps, num_envs, p_term, p_trunc)
    adv, ret = compute_gae(**batch, gamma=gamma, lam=lam)
    ref_adv, ref_ret = reference_gae(**batch, gamma=gamma, lam=lam)
    assert adv.shape == ret.shape == (num_steps, num_envs)
    assert adv.dtype == ret.dtype == np.float32
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)


def test_terminated_stops_bootstrapping_and_advantage_flow():
    # One env, T = 3, the episode ends by the MDP at t = 1; t = 2 starts a new episode.
    gamma, lam = 0.9, 0.8
    rewards = np.array([[1.0], [2.0], [3.0]], np.float32)
    values = np.array([[0.5], [0.25], [4.0]], np.float32)
    terminated = np.array([[False], [True], [False]])
    batch = dict(
        rewards=rewards,
        values=values,
        terminated=terminated,
        truncated=no_dones(3, 1),
        final_values=np.full((3, 1), 100.0, np.float32),  # must be ignored: not truncated
        bootstrap_value=np.array([10.0], np.float32),
    )
    adv, ret = compute_gae(**batch, gamma=gamma, lam=lam)
    a2 = 3.0 + gamma * 10.0 - 4.0
    a1 = 2.0 - 0.25  # no bootstrap, and nothing from t = 2
    a0 = (1.0 + gamma * 0.25 - 0.5) + gamma * lam * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + values, rtol=1e-6)


def test_truncation_bootstraps_from_final_values():
    gamma, lam = 0.9, 0.8
    truncated = np.array([[False], [True], [False]])
    batch = dict(
        rewards=np.array([[1.0], [2.0], [3.0]], np.float32),
        values=np.array([[0.5], [0.25], [4.0]], np.float32),
        terminated=no_dones(3, 1),
        truncated=truncated,
        final_values=np.array([[100.0], [7.0], [100.0]], np.float32),
        bootstrap_value=np.array([10.0], np.float32),
    )
    adv, _ = compute_gae(**batch, gamma=gamma, lam=lam)
    a1 = 2.0 + gamma * 7.0 - 0.25  # final_values[1], not values[2] = 4.0
    a0 = (1.0 + gamma * 0.25 - 0.5) + gamma * lam * a1
    np.testing.assert_allclose(adv[:2, 0], [a0, a1], rtol=1e-6)


@settings(max_examples=50, deadline=None)
@given(num_steps=st.integers(2, 30), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_truncation_does_not_leak_across_the_episode_boundary(num_steps, data, seed):
    # Whatever happens after a truncation at step k (rewards, values, later dones, the
    # batch's bootstrap) must leave the advantages at steps <= k unchanged.
    k = data.draw(st.integers(0, num_steps - 2))
    rng = np.random.default_rng(seed)
    batch = make_batch(rng, num_steps, 3, p_term=0.0, p_trunc=0.0)
    batch["truncated"][k] = True
    adv, _ = compute_gae(**batch, gamma=0.99, lam=0.95)

    other = {name: arr.copy() for name, arr in batch.items()}
    after = slice(k + 1, None)
    other["rewards"][after] = rng.normal(size=other["rewards"][after].shape) * 50
    other["values"][after] = rng.normal(size=other["values"][after].shape) * 50
    other["terminated"][after] = rng.random(other["terminated"][after].shape) < 0.3
    other["bootstrap_value"][:] = 1e6
    adv_other, _ = compute_gae(**other, gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(adv_other[: k + 1], adv[: k + 1])
    assert not np.array_equal(adv_other[after], adv[after])


def test_terminated_wins_when_both_flags_are_set():
    batch = dict(
        rewards=np.array([[1.0], [2.0]], np.float32),
        values=np.array([[0.5], [0.25]], np.float32),
        terminated=np.array([[True], [False]]),
        truncated=np.array([[True], [False]]),
        final_values=np.array([[100.0], [0.0]], np.float32),
        bootstrap_value=np.array([0.0], np.float32),
    )
    adv, _ = compute_gae(**batch, gamma=0.9, lam=0.9)
    assert adv[0, 0] == pytest.approx(1.0 - 0.5)


def test_unused_final_and_bootstrap_values_may_be_nan():
    # The actor may leave NaN where no bootstrap is needed; it must not reach the output.
    rng = np.random.default_rng(0)
    batch = make_batch(rng, 16, 4)
    batch["terminated"][-1] = True  # the last step ends everywhere: bootstrap unused
    batch["final_values"][~batch["truncated"]] = np.nan
    batch["bootstrap_value"][:] = np.nan
    adv, ret = compute_gae(**batch, gamma=0.99, lam=0.95)
    assert np.isfinite(adv).all() and np.isfinite(ret).all()
    ref_adv, _ = reference_gae(**batch, gamma=0.99, lam=0.95)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)


def test_lambda_one_gives_discounted_returns_minus_values():
    rng = np.random.default_rng(1)
    num_steps, num_envs, gamma = 12, 3, 0.97
    batch = make_batch(rng, num_steps, num_envs, p_term=0.0, p_trunc=0.0)
    adv, ret = compute_gae(**batch, gamma=gamma, lam=1.0)
    # G_t = sum_k gamma^k r_{t+k} + gamma^(T-t) * bootstrap, written as a closed-form sum.
    r = batch["rewards"].astype(np.float64)
    expected_ret = np.empty((num_steps, num_envs))
    for t in range(num_steps):
        discounts = gamma ** np.arange(num_steps - t)
        expected_ret[t] = discounts @ r[t:] + gamma ** (num_steps - t) * batch["bootstrap_value"]
    np.testing.assert_allclose(ret, expected_ret, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv, expected_ret - batch["values"], rtol=1e-5, atol=1e-5)


def test_lambda_zero_gives_one_step_td_error():
    rng = np.random.default_rng(2)
    gamma = 0.9
    batch = make_batch(rng, 10, 4, p_term=0.2, p_trunc=0.2)
    adv, _ = compute_gae(**batch, gamma=gamma, lam=0.0)
    next_values = np.concatenate([batch["values"][1:], batch["bootstrap_value"][None]])
    next_values = np.where(batch["truncated"], batch["final_values"], next_values)
    next_values = np.where(batch["terminated"], 0.0, next_values)
    td = batch["rewards"] + gamma * next_values - batch["values"]
    np.testing.assert_allclose(adv, td, rtol=1e-6, atol=1e-6)


def test_inputs_are_not_modified():
    batch = make_batch(np.random.default_rng(3), 8, 2)
    before = {name: arr.copy() for name, arr in batch.items()}
    compute_gae(**batch, gamma=0.99, lam=0.95)
    for name, arr in batch.items():
        np.testing.assert_array_equal(arr, before[name])


def test_mismatched_shapes_are_rejected():
    batch = make_batch(np.random.default_rng(4), 8, 2)
    batch["rewards"] = batch["rewards"][:-1]
    with pytest.raises(ValueError, match="rewards"):
        compute_gae(**batch, gamma=0.99, lam=0.95)
    batch = make_batch(np.random.default_rng(4), 8, 2)
    batch["bootstrap_value"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="bootstrap_value"):
        compute_gae(**batch, gamma=0.99, lam=0.95)
