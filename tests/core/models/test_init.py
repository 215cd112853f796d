"""`--init`: how a new run's weights start (CleanRL's per-layer gains, or gain 1 on every
layer as Sample Factory's), through the learner's own model building."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ppomq.core.models import build_model
from ppomq.core.models.init import apply_init
from ppomq.core.settings import LearnerSettings
from ppomq.learner.service import _build_trainer

CNN = {"arch": "nature-cnn", "obs_shape": [2, 36, 36], "action": {"kind": "categorical", "n": 3}}
MLP = {
    "arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
    "hidden": [64, 64], "activation": "tanh",
}  # fmt: skip


def _gains(policy: nn.Module) -> dict[str, float]:
    """Each layer's largest singular value: an orthogonal matrix's gain."""
    return {
        name: float(torch.linalg.matrix_norm(m.weight.detach().flatten(1), ord=2))
        for name, m in policy.named_modules()
        if isinstance(m, (nn.Linear, nn.Conv2d))
    }


@pytest.mark.parametrize("spec", [CNN, MLP], ids=["nature-cnn", "mlp"])
def test_unit_init_makes_every_layer_orthogonal_with_gain_one(spec):
    policy = apply_init(build_model(spec), "unit")
    for name, m in policy.named_modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            w = m.weight.detach().flatten(1)
            small = min(w.shape)
            gram = w @ w.T if w.shape[0] == small else w.T @ w
            assert torch.allclose(gram, torch.eye(small), atol=1e-4), name
            assert not m.bias.detach().any(), name


def test_cleanrl_init_keeps_the_per_layer_gains():
    gains = _gains(apply_init(build_model(CNN), "cleanrl"))
    assert gains["pi"] == pytest.approx(0.01, rel=1e-3)
    assert gains["v"] == pytest.approx(1.0, rel=1e-3)
    assert gains["fc"] == pytest.approx(2**0.5, rel=1e-3)
    assert all(gains[f"conv.{i}"] == pytest.approx(2**0.5, rel=1e-3) for i in range(3))


@pytest.mark.parametrize(("init", "pi_gain"), [("cleanrl", 0.01), ("unit", 1.0)])
def test_the_learner_starts_a_new_run_with_the_init_setting(tmp_path, init, pi_gain):
    settings = LearnerSettings(env_id="CartPole-v1", run_dir=str(tmp_path), init=init)
    _, trainer = _build_trainer(settings, torch.device("cpu"))
    assert _gains(trainer.policy)["pi.2"] == pytest.approx(pi_gain, rel=1e-3)
