"""vtrace against the explicit sum of Espeholt et al. 2018, eq. 1, and against GAE on-policy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppomq.learner.gae import compute_gae
from ppomq.learner.vtrace import VTraceReturns, vtrace


def reference_vtrace(
    behaviour_logp,
    target_logp,
    rewards,
    values,
    bootstrap_value,
    discounts,
    rho_bar,
    c_bar,
    pg_rho_bar,
):
    """The paper's definition, written as the sum over t >= s (not the recursion), in float64.

    vs_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) * rho_t * delta_t,
    delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t),
    rho_t = min(rho_bar, pi/mu), c_i = min(c_bar, pi/mu).
    """
    num_steps, num_envs = values.shape
    ratio = np.exp(target_logp.astype(np.float64) - behaviour_logp)
    v = np.concatenate([values, bootstrap_value[None]]).astype(np.float64)  # [T + 1, N]
    vs = np.zeros((num_steps + 1, num_envs))
    vs[num_steps] = v[num_steps]
    pg = np.zeros((num_steps, num_envs))
    for n in range(num_envs):
        for s in range(num_steps):
            total, weight = 0.0, 1.0
            for t in range(s, num_steps):
                delta = rewards[t, n] + discounts[t, n] * v[t + 1, n] - v[t, n]
                total += weight * min(rho_bar, ratio[t, n]) * delta
                weight *= discounts[t, n] * min(c_bar, ratio[t, n])
            vs[s, n] = v[s, n] + total
        for s in range(num_steps):
            target = rewards[s, n] + discounts[s, n] * vs[s + 1, n]
            pg[s, n] = min(pg_rho_bar, ratio[s, n]) * (target - v[s, n])
    return vs[:num_steps], pg


def make_batch(rng, num_steps, num_envs, policy_gap=0.5, p_done=0.1, gamma=0.99):
    f32 = np.float32
    behaviour = rng.normal(-1.0, 0.5, size=(num_steps, num_envs))
    return dict(
        behaviour_logp=behaviour.astype(f32),
        target_logp=(behaviour + rng.normal(0, policy_gap, size=behaviour.shape)).astype(f32),
        rewards=rng.normal(size=(num_steps, num_envs)).astype(f32),
        values=rng.normal(size=(num_steps, num_envs)).astype(f32),
        bootstrap_value=rng.normal(size=num_envs).astype(f32),
        discounts=(gamma * (rng.random((num_steps, num_envs)) >= p_done)).astype(f32),
    )


@settings(max_examples=60, deadline=None)
@given(
    num_steps=st.integers(1, 20),
    num_envs=st.integers(1, 4),
    policy_gap=st.sampled_from([0.0, 0.3, 1.5]),
    p_done=st.sampled_from([0.0, 0.2, 1.0]),
    c_bar=st.sampled_from([0.5, 1.0]),
    rho_extra=st.sampled_from([0.0, 1.0, 100.0]),
    pg_rho_bar=st.sampled_from([0.5, 1.0, 100.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_explicit_sum_reference(
    num_steps, num_envs, policy_gap, p_done, c_bar, rho_extra, pg_rho_bar, seed
):
    rng = np.random.default_rng(seed)
    batch = make_batch(rng, num_steps, num_envs, policy_gap, p_done)
    clips = dict(rho_bar=c_bar + rho_extra, c_bar=c_bar, pg_rho_bar=pg_rho_bar)
    out = vtrace(**batch, **clips)
    ref_vs, ref_pg = reference_vtrace(**batch, **clips)
    assert isinstance(out, VTraceReturns)
    assert out.vs.dtype == out.pg_advantages.dtype == np.float32
    assert out.vs.shape == out.pg_advantages.shape == (num_steps, num_envs)
    np.testing.assert_allclose(out.vs, ref_vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.pg_advantages, ref_pg, rtol=1e-4, atol=1e-4)


def test_on_policy_equals_gae_with_lambda_one():
    # pi = mu: every rho and c is 1, so vs are the bootstrapped discounted returns and the
    # pg advantages are GAE(lambda = 1) advantages (Espeholt et al. 2018, section 4.1).
    rng = np.random.default_rng(0)
    gamma = 0.97
    batch = make_batch(rng, 24, 5, policy_gap=0.0, p_done=0.1, gamma=gamma)
    terminated = batch["discounts"] == 0.0
    out = vtrace(**batch)
    adv, ret = compute_gae(
        batch["rewards"],
        batch["values"],
        terminated,
        np.zeros_like(terminated),
        np.zeros_like(batch["values"]),
        batch["bootstrap_value"],
        gamma=gamma,
        lam=1.0,
    )
    np.testing.assert_allclose(out.vs, ret, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages, adv, rtol=1e-5, atol=1e-5)


def test_importance_weights_above_the_thresholds_are_clipped():
    rng = np.random.default_rng(1)
    batch = make_batch(rng, 10, 3, policy_gap=0.0)
    batch["target_logp"][4] = batch["behaviour_logp"][4] + 3.0  # pi/mu = e^3
    other = {k: v.copy() for k, v in batch.items()}
    other["target_logp"][4] = batch["behaviour_logp"][4] + 6.0  # pi/mu = e^6
    out, out_other = vtrace(**batch), vtrace(**other)
    np.testing.assert_array_equal(out.vs, out_other.vs)
    np.testing.assert_array_equal(out.pg_advantages, out_other.pg_advantages)
    # Clipped at 1 everywhere, so this batch is scored exactly as if it were on-policy.
    on_policy = dict(batch, target_logp=batch["behaviour_logp"])
    np.testing.assert_allclose(out.vs, vtrace(**on_policy).vs, rtol=1e-6)


def test_target_policy_that_never_takes_the_action_cuts_the_trace():
    # pi(a_k) ~ 0: c_k = rho_k = 0, so vs_k = V(x_k) and nothing after k reaches steps <= k.
    rng = np.random.default_rng(2)
    k = 5
    batch = make_batch(rng, 12, 3, p_done=0.0)
    batch["target_logp"][k] = -1e4
    out = vtrace(**batch)
    np.testing.assert_array_equal(out.vs[k], batch["values"][k])
    other = {name: arr.copy() for name, arr in batch.items()}
    other["rewards"][k + 1 :] += 100.0
    other["bootstrap_value"] += 100.0
    np.testing.assert_array_equal(vtrace(**other).vs[: k + 1], out.vs[: k + 1])


def test_zero_discount_stops_bootstrapping_across_episode_end():
    rng = np.random.default_rng(3)
    k = 3
    batch = make_batch(rng, 8, 2, p_done=0.0)
    batch["discounts"][k] = 0.0
    out = vtrace(**batch)
    other = {name: arr.copy() for name, arr in batch.items()}
    other["values"][k + 1 :] -= 50.0
    other["rewards"][k + 1 :] += 50.0
    other_out = vtrace(**other)
    np.testing.assert_array_equal(other_out.vs[: k + 1], out.vs[: k + 1])
    np.testing.assert_array_equal(other_out.pg_advantages[: k + 1], out.pg_advantages[: k + 1])


def test_mismatched_shapes_are_rejected():
    batch = make_batch(np.random.default_rng(4), 8, 2)
    batch["discounts"] = batch["discounts"][:, :1]
    with pytest.raises(ValueError, match="discounts"):
        vtrace(**batch)
