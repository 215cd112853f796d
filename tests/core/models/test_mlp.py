"""MLPActorCritic and its numpy inference path: the same policy two ways."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppomq.core.models import build_model

SPECS = {
    "categorical": {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 3},
                    "hidden": [16, 16], "activation": "tanh", "obs_norm": None},
    "gaussian, normalized": {"arch": "mlp", "obs_shape": [2, 3],
                             "action": {"kind": "gaussian", "shape": [2]}, "hidden": [8],
                             "activation": "relu", "obs_norm": {"clip": 10.0, "epsilon": 1e-8}},
}  # fmt: skip


@pytest.mark.parametrize("name", SPECS)
def test_greedy_inference_is_the_mode_of_the_models_distribution(name):
    torch.manual_seed(0)
    model = build_model(SPECS[name])
    obs = np.random.default_rng(0).normal(3.0, 2.0, size=(64, *model.spec["obs_shape"]))
    if model.obs_norm is not None:  # statistics far from the identity, as after training
        model.obs_norm.update(torch.from_numpy(obs).flatten(1))
    with torch.no_grad():
        model.pi[-1].weight.mul_(100.0)  # an untrained head's outputs are all near zero
        head, _ = model(model.preprocess(torch.from_numpy(obs)))
    expected = head.argmax(-1) if model.discrete else head[0].reshape(len(obs), 2)
    got = model.inference().greedy(obs)
    assert got.shape == tuple(expected.shape)
    if model.discrete:
        assert len(np.unique(got)) > 1  # the comparison covers more than one action
        np.testing.assert_array_equal(got, expected.numpy())
    else:
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
