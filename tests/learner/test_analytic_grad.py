"""The hand-derived PPO gradients equal autograd's on the same policy and minibatch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppomq.learner.analytic_grad import ActorCriticGradient, Minibatch
from ppomq.learner.flat_params import FlatParameters
from ppomq.learner.trainer import AutogradGradient
from ppomq.policy import ActorCritic


def _policy(discrete: bool, hidden: list[int], obs_dim: int, n_out: int, seed: int):
    torch.manual_seed(seed)
    spec = {"arch": "mlp", "obs_shape": [obs_dim], "hidden": hidden,
            "action_kind": "discrete" if discrete else "continuous"}  # fmt: skip
    spec.update({"n_actions": n_out} if discrete else {"action_shape": [n_out]})
    policy = ActorCritic(spec).double()
    with torch.no_grad():  # large enough weights that every clip and branch is exercised
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return policy


def _minibatch(policy: ActorCritic, b: int, obs_dim: int, n_out: int, seed: int) -> Minibatch:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, obs_dim, generator=g, dtype=torch.float64)
    if policy.discrete:
        actions = torch.randint(0, n_out, (b,), generator=g)
    else:
        actions = torch.randn(b, n_out, generator=g, dtype=torch.float64)
    with torch.no_grad():
        logp, _, values = policy.evaluate(obs, actions)
    noise = lambda: torch.randn(b, generator=g, dtype=torch.float64)  # noqa: E731
    return Minibatch(
        obs=obs, actions=actions,
        old_logp=logp + 0.3 * noise(),  # ratios both inside and outside the clip range
        old_values=values + 0.3 * noise(),
        advantages=noise(), returns=values + noise(),
    )  # fmt: skip


def _grads(policy: ActorCritic) -> list[torch.Tensor]:
    return [p.grad.clone() for p in policy.parameters()]


@settings(max_examples=60, deadline=None)
@given(
    discrete=st.booleans(),
    hidden=st.sampled_from([[8], [16, 16], [8, 12, 6]]),
    b=st.integers(2, 40),
    ent_coef=st.sampled_from([0.0, 0.01, 0.5]),
    vf_coef=st.sampled_from([0.0, 0.5, 2.0]),
    clip_vloss=st.booleans(),
    norm_adv=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gradients_and_stats_match_autograd(
    discrete, hidden, b, ent_coef, vf_coef, clip_vloss, norm_adv, seed
):
    obs_dim, n_out = 5, 3
    policy = _policy(discrete, hidden, obs_dim, n_out, seed)
    flat = FlatParameters(policy)
    mb = _minibatch(policy, b, obs_dim, n_out, seed)
    coefs = dict(clip_coef=0.2, vf_coef=vf_coef, ent_coef=ent_coef, clip_vloss=clip_vloss,
                 norm_adv=norm_adv)  # fmt: skip

    ref_stats = AutogradGradient(policy, flat)(mb, **coefs)
    ref = _grads(policy)
    flat.grad.fill_(123.0)  # the analytic path must overwrite, not accumulate
    stats = ActorCriticGradient(policy)(mb, **coefs)

    for (name, _), want, got in zip(policy.named_parameters(), ref, _grads(policy), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11, msg=name)
    for name, want, got in zip(stats._fields, ref_stats, stats, strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-9, atol=1e-12, msg=name)


def test_the_gradient_is_not_zero_where_it_is_compared():
    # Guards the comparison above from passing on two all-zero gradients.
    policy = _policy(True, [8], 5, 3, seed=0)
    FlatParameters(policy)
    mb = _minibatch(policy, 32, 5, 3, seed=0)
    ActorCriticGradient(policy)(mb, clip_coef=0.2, vf_coef=0.5, ent_coef=0.0,
                                clip_vloss=False, norm_adv=True)  # fmt: skip
    for p in policy.parameters():
        assert p.grad.abs().sum() > 0


def test_needs_flat_gradient_slots():
    policy = _policy(True, [8], 5, 3, seed=0)
    with pytest.raises(ValueError, match="FlatParameters"):
        ActorCriticGradient(policy)


def test_one_sample_minibatch_with_normalized_advantages_is_refused():
    policy = _policy(True, [8], 5, 3, seed=0)
    FlatParameters(policy)
    mb = _minibatch(policy, 1, 5, 3, seed=0)
    with pytest.raises(ValueError, match="at least 2"):
        ActorCriticGradient(policy)(mb, clip_coef=0.2, vf_coef=0.5, ent_coef=0.0,
                                    clip_vloss=False, norm_adv=True)  # fmt: skip
