"""FlatParameters keeps the module working on one buffer; FlatAdam is torch's Adam."""

from __future__ import annotations

import pytest
import torch

from ppomq.core.models import build_model
from ppomq.learner.flat_params import FlatAdam, FlatParameters

SPEC = {"arch": "mlp", "obs_shape": [3], "action": {"kind": "categorical", "n": 2},
        "hidden": [16, 16], "activation": "tanh", "obs_norm": None}  # fmt: skip


def test_parameters_and_grads_are_views_into_the_flat_buffers():
    policy = build_model(SPEC)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    flat = FlatParameters(policy)
    assert len(flat) == sum(p.numel() for p in policy.parameters())
    for k, v in policy.state_dict().items():
        torch.testing.assert_close(v, before[k])  # re-seating kept every value
    flat.data.add_(1.0)
    for k, v in policy.state_dict().items():
        torch.testing.assert_close(v, before[k] + 1.0)
    obs = torch.randn(7, 3)
    logp, _, value = policy.evaluate(obs, torch.zeros(7, dtype=torch.long))
    (logp.sum() + value.sum()).backward()  # autograd accumulates into the flat grad
    assert flat.grad.abs().sum() > 0
    assert sum(p.grad.abs().sum() for p in policy.parameters()) == pytest.approx(
        float(flat.grad.abs().sum()), rel=1e-5
    )


def test_load_state_dict_writes_through_to_the_buffer():
    policy, other = build_model(SPEC), build_model(SPEC)
    flat = FlatParameters(policy)
    policy.load_state_dict(other.state_dict())
    want = torch.cat([p.detach().reshape(-1) for p in other.parameters()])
    torch.testing.assert_close(flat.data, want)


def test_clip_grad_norm_matches_torch():
    policy = build_model(SPEC)
    flat = FlatParameters(policy)
    flat.grad.copy_(torch.randn(len(flat)) * 3)
    copies = [torch.nn.Parameter(p.detach().clone()) for p in policy.parameters()]
    for c, p in zip(copies, policy.parameters(), strict=True):
        c.grad = p.grad.clone()
    want_norm = torch.nn.utils.clip_grad_norm_(copies, 0.5)
    norm = flat.clip_grad_norm_(0.5)
    assert float(norm) == pytest.approx(float(want_norm), rel=1e-6)
    torch.testing.assert_close(torch.cat([c.grad.reshape(-1) for c in copies]), flat.grad)
    assert float(flat.grad.norm()) == pytest.approx(0.5, rel=1e-5)


def test_small_gradients_are_not_scaled_up():
    flat = FlatParameters(build_model(SPEC))
    flat.grad.fill_(1e-4)
    flat.clip_grad_norm_(0.5)
    torch.testing.assert_close(flat.grad, torch.full_like(flat.grad, 1e-4))


def test_flat_adam_follows_torch_adam_step_for_step():
    torch.manual_seed(0)
    params = torch.randn(50, dtype=torch.float64)
    grad = torch.zeros_like(params)
    ref = torch.nn.Parameter(params.clone())
    ref_opt = torch.optim.Adam([ref], lr=1e-3, eps=1e-5)
    ours = FlatAdam(params, grad, eps=1e-5)
    for step in range(30):
        g = torch.randn(50, dtype=torch.float64)
        lr = 1e-3 * (1 - step / 30)
        ref.grad = g.clone()
        for group in ref_opt.param_groups:
            group["lr"] = lr
        ref_opt.step()
        grad.copy_(g)
        ours.step(lr)
    torch.testing.assert_close(params, ref.detach(), rtol=1e-12, atol=1e-12)


def test_adam_state_round_trips_and_refuses_another_architecture():
    params = torch.randn(10)
    grad = torch.randn(10)
    a = FlatAdam(params, grad)
    a.step(1e-3)
    b = FlatAdam(torch.zeros(10), torch.zeros(10))
    b.load_state_dict(a.state_dict())
    assert b.steps == 1
    torch.testing.assert_close(b.exp_avg_sq, a.exp_avg_sq)
    with pytest.raises(ValueError, match="another architecture"):
        FlatAdam(torch.zeros(11), torch.zeros(11)).load_state_dict(a.state_dict())


def test_adam_resumes_from_a_torch_adam_checkpoint():
    # Checkpoints written before FlatAdam hold torch.optim.Adam's per-parameter state.
    policy = build_model(SPEC)
    torch_adam = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for p in policy.parameters():
        p.grad = torch.randn_like(p)
    torch_adam.step()
    flat = FlatParameters(policy)
    ours = FlatAdam(flat.data, flat.grad)
    ours.load_state_dict(torch_adam.state_dict())
    assert ours.steps == 1
    want = torch.cat([torch_adam.state[p]["exp_avg"].reshape(-1) for p in policy.parameters()])
    torch.testing.assert_close(ours.exp_avg, want)
