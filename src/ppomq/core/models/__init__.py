"""Policy models, built anywhere from the `model` spec that travels in every weights header.

A registry maps each spec's `arch` to a model class, so a new architecture (a CNN, an
LSTM) joins by registering here; the learner and actors only ever call `build_model`.
Every model has the interface of `MLPActorCritic`: `preprocess(obs)` (no parameters: the
learner runs it once per update) and `evaluate(x, actions)` for the learner's objective,
`act` to sample, `inference()` for the actor's hot path and evaluation, `dist` (its action
distribution) and `obs_norm` (its normalizer, or None).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from ppomq.core.models.cnn import NatureCNN
from ppomq.core.models.lstm import LSTMActorCritic
from ppomq.core.models.mlp import MLPActorCritic
from ppomq.core.models.spec import COMMON_KEYS, ModelSpecError, model_spec_for

__all__ = [
    "InferencePolicy",
    "ModelSpecError",
    "Policy",
    "build_model",
    "load_numpy_state",
    "model_spec_for",
    "numpy_state",
    "register_model",
]

Policy = MLPActorCritic  # the interface every registered model offers


class InferencePolicy(Protocol):
    """What `model.inference()` returns: the actor's numpy-in, numpy-out policy."""

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, logp of that action, value) for a batch of observations."""
        ...

    def value(self, obs: np.ndarray) -> np.ndarray: ...

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The most likely action (the mean, for Gaussian policies), unclipped."""
        ...


_REGISTRY: dict[str, type[nn.Module]] = {
    "mlp": MLPActorCritic,
    "nature-cnn": NatureCNN,
    "lstm": LSTMActorCritic,
}


def register_model(arch: str, cls: type[nn.Module]) -> None:
    """Make `arch` buildable from specs (its class takes the spec as its one argument)."""
    _REGISTRY[arch] = cls


def build_model(spec: dict[str, Any]) -> Policy:
    """The model a spec describes, freshly initialized; ModelSpecError if it cannot be."""
    if not isinstance(spec, dict) or any(k not in spec for k in COMMON_KEYS):
        raise ModelSpecError(
            f"model spec needs {', '.join(COMMON_KEYS)}; got {spec!r:.200} "
            "(weights from an older ppomq? retrain, or use the ppomq that wrote them)"
        )
    arch = spec["arch"]
    if arch not in _REGISTRY:
        raise ModelSpecError(
            f"model arch {arch!r} is unknown; known: {', '.join(sorted(_REGISTRY))}"
        )
    return _REGISTRY[arch](spec)


def numpy_state(policy: nn.Module) -> dict[str, np.ndarray]:
    """Parameters and buffers as numpy arrays (views when possible), for pack_weights."""
    return {k: v.detach().cpu().numpy() for k, v in policy.state_dict().items()}


def load_numpy_state(policy: nn.Module, tensors: dict[str, np.ndarray]) -> None:
    """Copy received arrays into the policy in place (the arrays may be read-only views).
    ModelSpecError when the tensors are not the ones the spec's model has."""
    state = policy.state_dict()
    missing = sorted(set(state) - set(tensors))
    wrong = [
        f"{k} {tuple(np.shape(tensors[k]))} != {tuple(v.shape)}"
        for k, v in state.items()
        if k in tensors and tuple(np.shape(tensors[k])) != tuple(v.shape)
    ]
    if missing or wrong:
        raise ModelSpecError(
            "weights do not match their model spec: "
            + "; ".join([*(f"missing {k}" for k in missing[:3]), *wrong[:3]])
        )
    with torch.no_grad():
        for name, param in state.items():
            param.copy_(torch.from_numpy(np.asarray(tensors[name]).copy()))
