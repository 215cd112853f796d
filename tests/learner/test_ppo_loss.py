"""ppo_loss against a numpy reference: values, analytic gradients, clipping behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ppomq.learner.ppo_loss import PPOLossStats, ppo_loss

COEFS = dict(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01)


def reference_loss(
    new_logp,
    old_logp,
    advantages,
    new_values,
    old_values,
    returns,
    entropy,
    clip_coef,
    vf_coef,
    ent_coef,
    clip_vloss,
    norm_adv,
):
    """CleanRL ppo.py in float64 numpy; returns (loss, stats dict, d loss/d new_logp,
    d loss/d new_values, d loss/d entropy), gradients derived by hand."""
    adv, new_v, old_v, ret, ent = advantages, new_values, old_values, returns, entropy
    b = new_logp.shape[0]
    logratio = new_logp - old_logp
    ratio = np.exp(logratio)
    if norm_adv:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    low, high = 1.0 - clip_coef, 1.0 + clip_coef
    pg1 = -adv * ratio
    pg2 = -adv * np.clip(ratio, low, high)
    pg_loss = np.maximum(pg1, pg2).mean()
    # The unclipped term is the active one unless the clipped one is strictly larger; where
    # the clipped term is active the ratio lies outside [low, high], so its slope is 0.
    # d ratio / d new_logp = ratio.
    unclipped_active = pg1 >= pg2
    d_logp = np.where(unclipped_active, -adv * ratio, 0.0) / b

    err = new_v - ret
    if clip_vloss:
        v_clipped = old_v + np.clip(new_v - old_v, -clip_coef, clip_coef)
        err_clipped = v_clipped - ret
        v_loss = 0.5 * np.maximum(err**2, err_clipped**2).mean()
        inside = np.abs(new_v - old_v) <= clip_coef
        d_v = np.where(err**2 >= err_clipped**2, err, np.where(inside, err_clipped, 0.0)) / b
    else:
        v_loss = 0.5 * (err**2).mean()
        d_v = err / b
    loss = pg_loss - ent_coef * ent.mean() + vf_coef * v_loss
    stats = dict(
        policy_loss=pg_loss,
        value_loss=v_loss,
        entropy=ent.mean(),
        approx_kl=((ratio - 1.0) - logratio).mean(),
        clip_fraction=(np.abs(ratio - 1.0) > clip_coef).mean(),
    )
    return loss, stats, d_logp, vf_coef * d_v, np.full(b, -ent_coef / b)


def make_inputs(rng, b, spread=0.3):
    return dict(
        new_logp=rng.normal(-1.0, 0.3, size=b) + rng.normal(0.0, spread, size=b),
        old_logp=rng.normal(-1.0, 0.3, size=b),
        advantages=rng.normal(size=b),
        new_values=rng.normal(size=b),
        old_values=rng.normal(size=b),
        returns=rng.normal(size=b),
        entropy=rng.uniform(0.1, 2.0, size=b),
    )


def run_torch(inputs, dtype=torch.float32, **kwargs):
    """ppo_loss on tensors made from numpy inputs; returns (loss, stats, leaf tensors)."""
    t = {k: torch.tensor(v, dtype=dtype) for k, v in inputs.items()}
    for name in ("new_logp", "new_values", "entropy"):
        t[name].requires_grad_(True)
    loss, stats = ppo_loss(**t, **kwargs)
    loss.backward()
    return loss, stats, t


def near_a_kink(inputs, clip_coef, clip_vloss):
    """True when an input sits within float32 noise of a clip boundary or a tie of the two
    value-loss branches, where the (sub)gradient is a matter of convention."""
    eps = 1e-3
    ratio = np.exp(inputs["new_logp"] - inputs["old_logp"])
    if np.any(np.abs(np.abs(ratio - 1.0) - clip_coef) < eps):
        return True
    if clip_vloss:
        dv = inputs["new_values"] - inputs["old_values"]
        if np.any(np.abs(np.abs(dv) - clip_coef) < eps):
            return True
        v_clipped = inputs["old_values"] + np.clip(dv, -clip_coef, clip_coef)
        outside = np.abs(dv) > clip_coef
        gap = (inputs["new_values"] - inputs["returns"]) ** 2 - (v_clipped - inputs["returns"]) ** 2
        if np.any(outside & (np.abs(gap) < eps)):
            return True
    return False


@settings(max_examples=100, deadline=None)
@given(
    b=st.integers(2, 64),
    clip_coef=st.sampled_from([0.1, 0.2, 0.3]),
    vf_coef=st.floats(0.0, 2.0),
    ent_coef=st.floats(0.0, 0.1),
    clip_vloss=st.booleans(),
    norm_adv=st.booleans(),
    spread=st.sampled_from([0.0, 0.1, 0.5]),
    seed=st.integers(0, 2**32 - 1),
)
def test_loss_stats_and_gradients_match_numpy_reference(
    b, clip_coef, vf_coef, ent_coef, clip_vloss, norm_adv, spread, seed
):
    inputs = make_inputs(np.random.default_rng(seed), b, spread)
    assume(not near_a_kink(inputs, clip_coef, clip_vloss))
    # Normalizing nearly equal advantages divides a float32 cancellation by a tiny std: the
    # float32 result then differs from the float64 reference by far more than rounding
    # elsewhere (found with b=2 and a std of 2e-4), a property of float32, not of the loss.
    assume(not norm_adv or inputs["advantages"].std(ddof=1) > 1e-2)
    kwargs = dict(
        clip_coef=clip_coef,
        vf_coef=vf_coef,
        ent_coef=ent_coef,
        clip_vloss=clip_vloss,
        norm_adv=norm_adv,
    )
    loss, stats, t = run_torch(inputs, **kwargs)
    ref_loss, ref_stats, d_logp, d_v, d_ent = reference_loss(**inputs, **kwargs)

    tol = dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss.item(), ref_loss, **tol)
    for name, value in ref_stats.items():
        np.testing.assert_allclose(getattr(stats, name).item(), value, **tol, err_msg=name)
    np.testing.assert_allclose(t["new_logp"].grad.numpy(), d_logp, **tol)
    np.testing.assert_allclose(t["new_values"].grad.numpy(), d_v, **tol)
    # Without an entropy bonus the loss does not depend on the entropy at all.
    assert (t["entropy"].grad is None) == (ent_coef == 0.0)
    d_ent_torch = torch.zeros(b) if ent_coef == 0.0 else t["entropy"].grad
    np.testing.assert_allclose(d_ent_torch.numpy(), d_ent, **tol)


@pytest.mark.parametrize("clip_vloss", [False, True])
@pytest.mark.parametrize("norm_adv", [False, True])
def test_gradients_pass_gradcheck_in_float64(clip_vloss, norm_adv):
    rng = np.random.default_rng(7)
    inputs = make_inputs(rng, 16, spread=0.4)
    assert not near_a_kink(inputs, 0.2, clip_vloss)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in inputs.items()}

    def loss_of(new_logp, new_values, entropy):
        loss, _ = ppo_loss(
            new_logp,
            t["old_logp"],
            t["advantages"],
            new_values,
            t["old_values"],
            t["returns"],
            entropy,
            **COEFS,
            clip_vloss=clip_vloss,
            norm_adv=norm_adv,
        )
        return loss

    leaves = [t[k].clone().requires_grad_(True) for k in ("new_logp", "new_values", "entropy")]
    assert torch.autograd.gradcheck(loss_of, leaves, eps=1e-6, atol=1e-7)


def one_sample(ratio, advantage, **overrides):
    """A batch of one sample (norm_adv off) with the given ratio and advantage."""
    inputs = dict(
        new_logp=np.array([np.log(ratio)]),
        old_logp=np.array([0.0]),
        advantages=np.array([advantage]),
        new_values=np.array([0.0]),
        old_values=np.array([0.0]),
        returns=np.array([0.0]),
        entropy=np.array([1.0]),
    )
    inputs.update({k: np.array([v]) for k, v in overrides.items()})
    return inputs


@pytest.mark.parametrize(
    ("ratio", "advantage"),
    [(1.5, 1.0), (0.5, -1.0)],
    ids=["ratio_above_range_positive_advantage", "ratio_below_range_negative_advantage"],
)
def test_clipped_sample_gives_zero_policy_gradient(ratio, advantage):
    # The policy already moved past 1 +/- c in the direction the advantage favours: the
    # clipped term is the pessimistic bound, is constant, and stops the gradient.
    _, stats, t = run_torch(one_sample(ratio, advantage), **COEFS, clip_vloss=False, norm_adv=False)
    assert t["new_logp"].grad.item() == 0.0
    assert stats.policy_loss.item() == pytest.approx(-advantage * np.clip(ratio, 0.8, 1.2))
    assert stats.clip_fraction.item() == 1.0


@pytest.mark.parametrize(
    ("ratio", "advantage"),
    [(1.5, -1.0), (0.5, 1.0), (1.1, 1.0), (0.9, -1.0)],
    ids=[
        "ratio_above_range_negative_advantage",
        "ratio_below_range_positive_advantage",
        "inside_range_positive_advantage",
        "inside_range_negative_advantage",
    ],
)
def test_unclipped_sample_keeps_the_policy_gradient(ratio, advantage):
    # Moves that make the surrogate worse are never clipped (the min in Schulman et al.
    # 2017, eq. 7): d(-A * ratio)/d logp = -A * ratio.
    _, _, t = run_torch(one_sample(ratio, advantage), **COEFS, clip_vloss=False, norm_adv=False)
    assert t["new_logp"].grad.item() == pytest.approx(-advantage * ratio)


def test_clip_vloss_stops_value_gradient_past_the_clip_range():
    # The new value moved 0.5 > c = 0.2 from the old one, towards the return: the clipped
    # error (old_v + c - R)^2 is the larger, and constant in new_values.
    inputs = one_sample(1.0, 0.0, new_values=0.5, old_values=0.0, returns=1.0)
    _, stats_on, t_on = run_torch(inputs, **COEFS, clip_vloss=True, norm_adv=False)
    assert t_on["new_values"].grad.item() == 0.0
    assert stats_on.value_loss.item() == pytest.approx(0.5 * (0.2 - 1.0) ** 2)

    _, stats_off, t_off = run_torch(inputs, **COEFS, clip_vloss=False, norm_adv=False)
    assert t_off["new_values"].grad.item() == pytest.approx(0.5 * (0.5 - 1.0))
    assert stats_off.value_loss.item() == pytest.approx(0.5 * (0.5 - 1.0) ** 2)


def test_clip_vloss_keeps_gradient_when_moving_away_from_the_return():
    # Moving past the clip range away from the return makes the unclipped error the larger
    # one, so the gradient is kept: the clip is a pessimistic bound, like the policy's.
    inputs = one_sample(1.0, 0.0, new_values=-0.5, old_values=0.0, returns=1.0)
    _, stats, t = run_torch(inputs, **COEFS, clip_vloss=True, norm_adv=False)
    assert t["new_values"].grad.item() == pytest.approx(0.5 * (-0.5 - 1.0))
    assert stats.value_loss.item() == pytest.approx(0.5 * 1.5**2)


def test_loss_is_policy_minus_entropy_bonus_plus_weighted_value_loss():
    inputs = make_inputs(np.random.default_rng(11), 32)
    loss, stats, _ = run_torch(inputs, clip_coef=0.2, vf_coef=0.7, ent_coef=0.03,
                               clip_vloss=True, norm_adv=True)  # fmt: skip
    expected = stats.policy_loss - 0.03 * stats.entropy + 0.7 * stats.value_loss
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_stats_are_detached_and_kl_is_computed_without_grad():
    _, stats, _ = run_torch(make_inputs(np.random.default_rng(12), 8), **COEFS,
                            clip_vloss=True, norm_adv=True)  # fmt: skip
    assert isinstance(stats, PPOLossStats)
    for name, value in stats._asdict().items():
        assert value.dim() == 0, name
        assert not value.requires_grad, name
        assert value.grad_fn is None, name


def test_on_policy_batch_has_zero_kl_and_no_clipping():
    inputs = make_inputs(np.random.default_rng(13), 32, spread=0.0)
    inputs["new_logp"] = inputs["old_logp"].copy()
    _, stats, _ = run_torch(inputs, **COEFS, clip_vloss=True, norm_adv=True)
    assert stats.approx_kl.item() == 0.0
    assert stats.clip_fraction.item() == 0.0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), spread=st.floats(0.0, 2.0))
def test_approx_kl_is_never_negative(seed, spread):
    # k3 = (r - 1) - log r >= 0 for every r > 0, so the mean cannot be negative.
    inputs = make_inputs(np.random.default_rng(seed), 16, spread)
    _, stats, _ = run_torch(inputs, torch.float64, **COEFS, clip_vloss=False, norm_adv=False)
    assert stats.approx_kl.item() >= 0.0


def test_norm_adv_makes_loss_invariant_to_advantage_scale_and_shift():
    inputs = make_inputs(np.random.default_rng(14), 32)
    scaled = dict(inputs, advantages=inputs["advantages"] * 37.0 + 5.0)
    kwargs = dict(**COEFS, clip_vloss=False)
    loss, _, _ = run_torch(inputs, torch.float64, **kwargs, norm_adv=True)
    loss_scaled, _, _ = run_torch(scaled, torch.float64, **kwargs, norm_adv=True)
    # Not exact: the +1e-8 in the denominator is not scaled with the advantages.
    assert loss_scaled.item() == pytest.approx(loss.item(), rel=1e-6)
    loss_raw, _, _ = run_torch(scaled, torch.float64, **kwargs, norm_adv=False)
    assert loss_raw.item() != pytest.approx(loss.item(), rel=1e-3)


def test_norm_adv_rejects_a_single_element_minibatch():
    with pytest.raises(ValueError, match="at least 2"):
        run_torch(one_sample(1.0, 1.0), **COEFS, clip_vloss=False, norm_adv=True)


# --- the adaptive KL penalty (Schulman et al. 2017, section 4) --------------------------------


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(2, 64),
    kl_coef=st.sampled_from([0.0, 0.3, 1.0, 3.0]),
    norm_adv=st.booleans(),
    spread=st.sampled_from([0.0, 0.1, 0.5]),
    seed=st.integers(0, 2**32 - 1),
)
def test_kl_penalty_loss_and_policy_gradient_match_numpy_reference(
    b, kl_coef, norm_adv, spread, seed
):
    inputs = make_inputs(np.random.default_rng(seed), b, spread)
    assume(not norm_adv or inputs["advantages"].std(ddof=1) > 1e-2)
    kwargs = dict(**COEFS, clip_vloss=False, norm_adv=norm_adv)
    loss, stats, t = run_torch(inputs, **kwargs, objective="kl-penalty", kl_coef=kl_coef)
    # Reference: -mean(A * r) + beta * mean((r - 1) - log r), r = exp(new - old); the value
    # and entropy terms are the clipped objective's (same reference, same inputs).
    adv = inputs["advantages"]
    if norm_adv:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    logratio = inputs["new_logp"] - inputs["old_logp"]
    ratio = np.exp(logratio)
    pg = (-adv * ratio).mean() + kl_coef * ((ratio - 1.0) - logratio).mean()
    _, ref_stats, _, d_v, _ = reference_loss(**inputs, **kwargs)
    ref_loss = pg + COEFS["vf_coef"] * ref_stats["value_loss"]
    ref_loss -= COEFS["ent_coef"] * inputs["entropy"].mean()
    # d/d new_logp: (-A * r + beta * (r - 1)) / B
    d_logp = (-adv * ratio + kl_coef * (ratio - 1.0)) / b
    tol = dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss.item(), ref_loss, **tol)
    np.testing.assert_allclose(stats.policy_loss.item(), pg, **tol)
    np.testing.assert_allclose(t["new_logp"].grad.numpy(), d_logp, **tol)
    np.testing.assert_allclose(t["new_values"].grad.numpy(), d_v, **tol)
    np.testing.assert_allclose(stats.approx_kl.item(), ref_stats["approx_kl"], **tol)


def test_kl_penalty_pulls_back_a_policy_that_moved_far_where_clip_gives_no_gradient():
    # Ratio 1.5 with a positive advantage: the clipped objective is flat (no gradient), the
    # penalty objective pushes log-prob up for the advantage and down for the KL; with a
    # large beta the KL wins and the gradient asks for a lower log-prob.
    inputs = one_sample(1.5, 1.0)
    kw = dict(**COEFS, clip_vloss=False, norm_adv=False)
    _, _, t = run_torch(inputs, **kw)
    assert t["new_logp"].grad.item() == 0.0
    _, _, t = run_torch(inputs, **kw, objective="kl-penalty", kl_coef=10.0)
    assert t["new_logp"].grad.item() > 0  # descent lowers the log-prob: back toward old
    _, _, t = run_torch(inputs, **kw, objective="kl-penalty", kl_coef=0.0)
    assert t["new_logp"].grad.item() < 0  # no penalty: the advantage keeps pushing


def test_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="objective"):
        run_torch(one_sample(1.0, 1.0), **COEFS, clip_vloss=False, norm_adv=False,
                  objective="trust-region")  # fmt: skip


@pytest.mark.parametrize(
    ("kl", "expected"),
    [(0.001, 0.5), (0.0066, 0.5), (0.0067, 1.0), (0.01, 1.0), (0.015, 1.0), (0.0151, 2.0)],
)
def test_adaptive_kl_coefficient_follows_the_ppo_papers_rule(kl, expected):
    from ppomq.learner.ppo_loss import adapt_kl_coef

    # target 0.01: halve below 0.01 / 1.5 = 0.00667, double above 0.015, else keep.
    assert adapt_kl_coef(1.0, kl, 0.01) == expected
