"""The hand-derived MLP backward gives the reference (autograd) gradient on every spec it
accepts, refuses the rest, and both train with the one objective of ppo_loss.py."""

from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppomq.core.errors import UsageError
from ppomq.core.models import build_model
from ppomq.core.models.mlp import MLPActorCritic
from ppomq.learner import ppo_loss as objective
from ppomq.learner.flat_params import FlatParameters
from ppomq.learner.gradients import AutogradGradient, Minibatch, select_gradient
from ppomq.learner.mlp_grad import MLPGradient

OBS_SHAPE = [5]


def _policy(action: dict, hidden: list[int], activation: str, norm_obs: bool, seed: int):
    torch.manual_seed(seed)
    spec = {"arch": "mlp", "obs_shape": OBS_SHAPE, "action": action, "hidden": hidden,
            "activation": activation,
            "obs_norm": {"clip": 2.0, "epsilon": 1e-8} if norm_obs else None}  # fmt: skip
    policy = build_model(spec).double()
    with torch.no_grad():  # large enough weights that every clip and branch is exercised
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        if norm_obs:  # statistics that matter, and a clip that bites on some inputs
            policy.obs_norm.update(torch.randn(50, 5, dtype=torch.float64) * 3 + 1)
    return policy


def _minibatch(policy: MLPActorCritic, b: int, seed: int) -> Minibatch:
    g = torch.Generator().manual_seed(seed)
    # Raw observations through the model's preprocessing (normalization with clipping),
    # as the trainer does once per update.
    obs = policy.preprocess(torch.randn(b, *OBS_SHAPE, generator=g, dtype=torch.float64) * 4)
    if policy.discrete:
        actions = torch.randint(0, policy.dist.n, (b,), generator=g)
    else:
        shape = (b, *policy.dist.action_shape)
        actions = torch.randn(*shape, generator=g, dtype=torch.float64)
    with torch.no_grad():
        logp, _, values = policy.evaluate(obs, actions)
    noise = lambda: torch.randn(b, generator=g, dtype=torch.float64)  # noqa: E731
    return Minibatch(
        obs=obs, actions=actions,
        old_logp=logp + 0.3 * noise(),  # ratios both inside and outside the clip range
        old_values=values + 0.3 * noise(),
        advantages=noise(), returns=values + noise(),
    )  # fmt: skip


def _grads(policy) -> list[torch.Tensor]:
    return [p.grad.clone() for p in policy.parameters()]


ACTIONS = [
    {"kind": "categorical", "n": 3},
    {"kind": "gaussian", "shape": [3]},
    {"kind": "gaussian", "shape": [2, 3]},
]


@settings(max_examples=80, deadline=None)
@given(
    action=st.sampled_from(ACTIONS),
    hidden=st.sampled_from([[], [8], [16, 16], [8, 12, 6]]),
    activation=st.sampled_from(["tanh", "relu"]),
    norm_obs=st.booleans(),
    b=st.integers(2, 40),
    ent_coef=st.sampled_from([0.0, 0.01, 0.5]),
    vf_coef=st.sampled_from([0.0, 0.5, 2.0]),
    clip_vloss=st.booleans(),
    norm_adv=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gradients_and_stats_match_autograd(
    action, hidden, activation, norm_obs, b, ent_coef, vf_coef, clip_vloss, norm_adv, seed
):
    policy = _policy(action, hidden, activation, norm_obs, seed)
    flat = FlatParameters(policy)
    mb = _minibatch(policy, b, seed)
    coefs = dict(clip_coef=0.2, vf_coef=vf_coef, ent_coef=ent_coef, clip_vloss=clip_vloss,
                 norm_adv=norm_adv)  # fmt: skip

    ref_stats = AutogradGradient(policy, flat)(mb, **coefs)
    ref = _grads(policy)
    flat.grad.fill_(123.0)  # the analytic path must overwrite, not accumulate
    stats = MLPGradient(policy)(mb, **coefs)

    for (name, _), want, got in zip(policy.named_parameters(), ref, _grads(policy), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11, msg=name)
    for name, want, got in zip(stats._fields, ref_stats, stats, strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize("action", ACTIONS)
def test_the_gradient_is_not_zero_where_it_is_compared(action):
    # Guards the comparison above from passing on two all-zero gradients.
    policy = _policy(action, [8], "tanh", True, seed=0)
    FlatParameters(policy)
    mb = _minibatch(policy, 32, seed=0)
    MLPGradient(policy)(mb, clip_coef=0.2, vf_coef=0.5, ent_coef=0.01,
                        clip_vloss=False, norm_adv=True)  # fmt: skip
    for name, p in policy.named_parameters():
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("choice", ["auto", "analytic", "autograd"])
def test_every_gradient_path_trains_with_the_one_objective(monkeypatch, choice):
    """Editing ppo_loss.py changes every path: a doubled objective doubles the gradient."""
    policy = _policy(ACTIONS[1], [8], "tanh", False, seed=1)
    flat = FlatParameters(policy)
    mb = _minibatch(policy, 16, seed=1)
    coefs = dict(clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, clip_vloss=True, norm_adv=True)
    gradient = select_gradient(choice, policy, flat)
    gradient(mb, **coefs)
    plain = flat.grad.clone()
    original = objective.ppo_loss

    def doubled(*args, **kwargs):
        loss, stats = original(*args, **kwargs)
        return 2 * loss, stats

    monkeypatch.setattr(objective, "ppo_loss", doubled)
    gradient(mb, **coefs)
    torch.testing.assert_close(flat.grad, 2 * plain, rtol=1e-9, atol=1e-12)
    assert plain.abs().sum() > 0


class _OtherModel(MLPActorCritic):
    """Any model the analytic path was not derived for (a CNN, an LSTM, ...)."""


def test_a_model_it_was_not_derived_for_is_refused_or_falls_back(caplog):
    policy = _OtherModel(_policy(ACTIONS[0], [8], "tanh", False, seed=0).spec)
    flat = FlatParameters(policy)
    with pytest.raises(UsageError, match="--gradients analytic cannot train"):
        select_gradient("analytic", policy, flat)
    with pytest.raises(ValueError, match="arch mlp only"):
        MLPGradient(policy)
    with caplog.at_level(logging.INFO, logger="ppomq.learner"):
        gradient = select_gradient("auto", policy, flat)
    assert isinstance(gradient, AutogradGradient)
    assert "autograd" in caplog.text


def test_needs_flat_gradient_slots():
    policy = _policy(ACTIONS[0], [8], "tanh", False, seed=0)
    with pytest.raises(ValueError, match="FlatParameters"):
        MLPGradient(policy)


def test_one_sample_minibatch_with_normalized_advantages_is_refused():
    policy = _policy(ACTIONS[0], [8], "tanh", False, seed=0)
    FlatParameters(policy)
    mb = _minibatch(policy, 1, seed=0)
    with pytest.raises(ValueError, match="at least 2"):
        MLPGradient(policy)(mb, clip_coef=0.2, vf_coef=0.5, ent_coef=0.0,
                            clip_vloss=False, norm_adv=True)  # fmt: skip
