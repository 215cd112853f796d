"""compute_vtrace against IMPALA's definition written as a sum (not the recursion the code
uses), the on-policy case against GAE with lambda = 1, and the episode-boundary cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppomq.learner.gae import compute_gae
from ppomq.learner.vtrace import compute_vtrace

from .test_gae import make_batch


def reference_vtrace(batch, behaviour_logp, target_logp, gamma, rho_bar, c_bar):
    """IMPALA eq. 1 as a sum, one env and one step at a time, in float64:

    v_s = V(x_s) + sum_{t=s}^{e} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t

    where e is the last step of s's episode inside the batch; A_s = rho_s (r_s + gamma
    v_{s+1} - V(x_s)), v_{s+1} being the next step's target inside the episode, else the
    value GAE bootstraps from."""
    rewards = batch["rewards"].astype(np.float64)
    values = batch["values"].astype(np.float64)
    term, trunc = batch["terminated"], batch["truncated"]
    num_steps, num_envs = values.shape
    ratio = np.exp(target_logp.astype(np.float64) - behaviour_logp.astype(np.float64))
    rho, c = np.minimum(ratio, rho_bar), np.minimum(ratio, c_bar)

    def next_value(t, n):
        if term[t, n]:
            return 0.0
        if trunc[t, n]:
            return float(batch["final_values"][t, n])
        if t == num_steps - 1:
            return float(batch["bootstrap_value"][n])
        return values[t + 1, n]

    delta = np.zeros_like(values)
    for t in range(num_steps):
        for n in range(num_envs):
            delta[t, n] = rho[t, n] * (rewards[t, n] + gamma * next_value(t, n) - values[t, n])
    v = np.zeros_like(values)
    for n in range(num_envs):
        for s in range(num_steps):
            total, weight = 0.0, 1.0
            for t in range(s, num_steps):
                total += gamma ** (t - s) * weight * delta[t, n]
                if term[t, n] or trunc[t, n]:
                    break
                weight *= c[t, n]
            v[s, n] = values[s, n] + total
    adv = np.zeros_like(values)
    for n in range(num_envs):
        for s in range(num_steps):
            ended = term[s, n] or trunc[s, n]
            nxt = v[s + 1, n] if (not ended and s < num_steps - 1) else next_value(s, n)
            adv[s, n] = rho[s, n] * (rewards[s, n] + gamma * nxt - values[s, n])
    return adv, v


def logps(rng, shape, spread):
    behaviour = rng.normal(-1.0, 0.5, size=shape).astype(np.float32)
    target = (behaviour + rng.normal(0.0, spread, size=shape)).astype(np.float32)
    return behaviour, target


@settings(max_examples=150, deadline=None)
@given(
    num_steps=st.integers(1, 30),
    num_envs=st.integers(1, 5),
    p_term=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    p_trunc=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    gamma=st.floats(0.0, 1.0),
    rho_bar=st.sampled_from([0.5, 1.0, 2.0]),
    c_bar=st.sampled_from([0.5, 1.0, 2.0]),
    spread=st.sampled_from([0.0, 0.3, 1.5]),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_impala_definition_for_random_shapes_policies_and_episode_ends(
    num_steps, num_envs, p_term, p_trunc, gamma, rho_bar, c_bar, spread, seed
):
    rng = np.random.default_rng(seed)
    batch = make_batch(rng, num_steps, num_envs, p_term, p_trunc)
    mu, pi = logps(rng, (num_steps, num_envs), spread)
    adv, v = compute_vtrace(**batch, behaviour_logp=mu, target_logp=pi, gamma=gamma,
                            rho_bar=rho_bar, c_bar=c_bar)  # fmt: skip
    ref_adv, ref_v = reference_vtrace(batch, mu, pi, gamma, rho_bar, c_bar)
    assert adv.shape == v.shape == (num_steps, num_envs)
    assert adv.dtype == v.dtype == np.float32
    np.testing.assert_allclose(v, ref_v, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(
    num_steps=st.integers(1, 30),
    p_term=st.sampled_from([0.0, 0.1]),
    p_trunc=st.sampled_from([0.0, 0.1]),
    seed=st.integers(0, 2**32 - 1),
)
def test_on_policy_targets_are_the_n_step_returns_of_gae_with_lambda_one(
    num_steps, p_term, p_trunc, seed
):
    rng = np.random.default_rng(seed)
    batch = make_batch(rng, num_steps, 4, p_term, p_trunc)
    mu, _ = logps(rng, (num_steps, 4), 0.0)
    adv, v = compute_vtrace(**batch, behaviour_logp=mu, target_logp=mu, gamma=0.97,
                            rho_bar=1.0, c_bar=1.0)  # fmt: skip
    gae_adv, gae_ret = compute_gae(**batch, gamma=0.97, lam=1.0)
    np.testing.assert_allclose(v, gae_ret, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(adv, gae_adv, rtol=1e-4, atol=1e-4)


def test_on_policy_return_without_episode_ends_is_the_discounted_sum_plus_bootstrap():
    gamma = 0.9
    batch = dict(
        rewards=np.array([[1.0], [2.0], [3.0]], np.float32),
        values=np.array([[0.5], [0.25], [4.0]], np.float32),
        terminated=np.zeros((3, 1), bool),
        truncated=np.zeros((3, 1), bool),
        final_values=np.full((3, 1), np.nan, np.float32),
        bootstrap_value=np.array([10.0], np.float32),
    )
    zero = np.zeros((3, 1), np.float32)
    _, v = compute_vtrace(**batch, behaviour_logp=zero, target_logp=zero, gamma=gamma,
                          rho_bar=1.0, c_bar=1.0)  # fmt: skip
    expected = [
        1 + gamma * 2 + gamma**2 * 3 + gamma**3 * 10,
        2 + gamma * 3 + gamma**2 * 10,
        3 + gamma * 10,
    ]
    np.testing.assert_allclose(v[:, 0], expected, rtol=1e-6)


def test_truncated_weights_bound_the_correction():
    # One step, the current policy 8x likelier than the behaviour policy: rho = rho_bar.
    batch = dict(
        rewards=np.array([[1.0]], np.float32),
        values=np.array([[0.0]], np.float32),
        terminated=np.array([[True]]),
        truncated=np.zeros((1, 1), bool),
        final_values=np.zeros((1, 1), np.float32),
        bootstrap_value=np.zeros(1, np.float32),
    )
    mu, pi = np.log(np.array([[0.1]], np.float32)), np.log(np.array([[0.8]], np.float32))
    adv, v = compute_vtrace(**batch, behaviour_logp=mu, target_logp=pi, gamma=0.99,
                            rho_bar=1.0, c_bar=1.0)  # fmt: skip
    assert v[0, 0] == pytest.approx(1.0) and adv[0, 0] == pytest.approx(1.0)
    adv, v = compute_vtrace(**batch, behaviour_logp=pi, target_logp=mu, gamma=0.99,
                            rho_bar=1.0, c_bar=1.0)  # fmt: skip
    assert v[0, 0] == pytest.approx(0.125) and adv[0, 0] == pytest.approx(0.125)


def test_nothing_flows_back_across_an_episode_end():
    rng = np.random.default_rng(5)
    batch = make_batch(rng, 10, 2, p_term=0.0, p_trunc=0.0)
    batch["truncated"][4] = True
    mu, pi = logps(rng, (10, 2), 0.5)
    kw = dict(behaviour_logp=mu, target_logp=pi, gamma=0.99, rho_bar=1.0, c_bar=1.0)
    adv, v = compute_vtrace(**batch, **kw)
    other = {k: a.copy() for k, a in batch.items()}
    other["rewards"][5:] *= 100
    other["bootstrap_value"][:] = 1e6
    adv2, v2 = compute_vtrace(**other, **kw)
    np.testing.assert_array_equal(v2[:5], v[:5])
    np.testing.assert_array_equal(adv2[:5], adv[:5])


def test_unused_final_and_bootstrap_values_may_be_nan_and_impossible_actions_do_not_overflow():
    rng = np.random.default_rng(6)
    batch = make_batch(rng, 12, 3)
    batch["terminated"][-1] = True
    batch["final_values"][~batch["truncated"]] = np.nan
    batch["bootstrap_value"][:] = np.nan
    mu, pi = logps(rng, (12, 3), 0.5)
    mu[3, 1] = -200.0  # the behaviour policy thought this action impossible
    adv, v = compute_vtrace(**batch, behaviour_logp=mu, target_logp=pi, gamma=0.99,
                            rho_bar=1.0, c_bar=1.0)  # fmt: skip
    assert np.isfinite(adv).all() and np.isfinite(v).all()


def test_bad_shapes_and_weights_are_rejected():
    rng = np.random.default_rng(7)
    batch = make_batch(rng, 8, 2)
    mu, pi = logps(rng, (8, 2), 0.1)
    with pytest.raises(ValueError, match="target_logp"):
        compute_vtrace(**batch, behaviour_logp=mu, target_logp=pi[:-1], gamma=0.9,
                       rho_bar=1.0, c_bar=1.0)  # fmt: skip
    with pytest.raises(ValueError, match="rho_bar"):
        compute_vtrace(**batch, behaviour_logp=mu, target_logp=pi, gamma=0.9,
                       rho_bar=0.0, c_bar=1.0)  # fmt: skip
