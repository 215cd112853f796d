"""`arch: "mlp"`: separate policy and value MLPs over flattened observations (the layout of
CleanRL's ppo.py and ppo_continuous_action.py). proto/WEIGHTS.md specifies it completely."""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ppomq.core.models.actor_critic import ActorCritic
from ppomq.core.models.distributions import ActionDistribution, distribution_for
from ppomq.core.models.obs_norm import ObsNormalizer, check_obs_norm
from ppomq.core.models.spec import ModelSpecError, check_action, check_int_list

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"tanh": torch.tanh, "relu": torch.relu}

Layer = tuple[Tensor, Tensor]  # (weight [out, in] as in nn.Linear, bias [out])


def _linear(n_in: int, n_out: int, gain: float) -> nn.Linear:
    # Orthogonal init with these gains is one of PPO's "implementation details"
    # (Huang et al. 2022, detail 2); it matters for CartPole-speed learning.
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _stack(n_in: int, hidden: list[int], n_out: int, out_gain: float) -> nn.ModuleList:
    sizes = [n_in, *hidden]
    layers = [_linear(a, b, math.sqrt(2)) for a, b in pairwise(sizes)]
    return nn.ModuleList([*layers, _linear(sizes[-1], n_out, out_gain)])


def check_spec(spec: dict[str, Any]) -> None:
    check_int_list(spec, "obs_shape", minimum=1, non_empty=True)
    check_int_list(spec, "hidden", minimum=1)
    check_action(spec)
    if spec.get("activation") not in ACTIVATIONS:
        raise ModelSpecError(
            f"activation {spec.get('activation')!r} is not one of {', '.join(ACTIVATIONS)}"
        )
    check_obs_norm(spec)


class MLPActorCritic(ActorCritic):
    """Tensors: `pi.{i}.weight|bias`, `v.{i}.weight|bias`, `log_std` (Gaussian actions
    only), `obs_norm.mean|var|count` (when the spec has obs_norm)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        check_spec(spec)
        self.spec = dict(spec)
        self.obs_dim = math.prod(spec["obs_shape"])
        self.dist: ActionDistribution = distribution_for(spec["action"])
        self.discrete = self.dist.discrete
        self.activation = str(spec["activation"])
        self._act = ACTIVATIONS[self.activation]
        hidden = list(spec["hidden"])
        norm = spec.get("obs_norm")
        self.obs_norm = (
            ObsNormalizer(self.obs_dim, clip=norm["clip"], epsilon=norm["epsilon"])
            if norm
            else None
        )
        n_out = self.dist.n if self.discrete else self.dist.dim
        self.v = _stack(self.obs_dim, hidden, 1, 1.0)
        self.pi = _stack(self.obs_dim, hidden, n_out, 0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(n_out))

    # -- the maths, in terms of the distribution ------------------------------------
    def preprocess(self, obs: Tensor) -> Tensor:
        """Raw observations [B, *obs_shape], any dtype -> the network's input [B, D]: no
        parameters, so the learner runs it once per update (statistics are fixed then)."""
        x = obs.flatten(1)
        dtype = self.v[0].weight.dtype
        if x.dtype != dtype:
            x = x.to(dtype)
        return self.obs_norm(x) if self.obs_norm is not None else x

    def _mlp(self, layers: nn.ModuleList, x: Tensor) -> Tensor:
        for layer in layers[:-1]:
            x = self._act(layer(x))
        return layers[-1](x)

    def head_of(self, pi_out: Tensor) -> Any:
        """The distribution's parameters from the policy MLP's output."""
        return pi_out if self.discrete else (pi_out, self.log_std)

    def forward(self, x: Tensor) -> tuple[Any, Tensor]:
        """(distribution parameters, value [B]) from preprocessed inputs."""
        return self.head_of(self._mlp(self.pi, x)), self._mlp(self.v, x).squeeze(-1)

    # -- what the fast paths need ------------------------------------------------------
    def layers(self) -> tuple[list[Layer], list[Layer]]:
        """(policy layers, value layers) as the parameters themselves (views, no copies)."""

        def pairs(stack: nn.ModuleList) -> list[Layer]:
            return [(m.weight, m.bias) for m in stack]

        return pairs(self.pi), pairs(self.v)

    def inference(self) -> MLPInference:
        return MLPInference(self)


class MLPInference:
    """The actor's hot path: `MLPActorCritic.act` without nn.Module calls, numpy in and out.

    Module dispatch costs more than the arithmetic at actor batch sizes, so the layers are
    plain addmm calls on copies of the weights (never views: loading newer weights into the
    module must not change a policy in use). Sampling is the distribution's own code.
    """

    def __init__(self, model: MLPActorCritic) -> None:
        self.dist = model.dist
        self.discrete = model.discrete
        self._act = model._act

        def copies(stack: nn.ModuleList) -> list[Layer]:
            return [
                (
                    m.weight.detach().t().clone(memory_format=torch.contiguous_format),
                    m.bias.detach().clone(),
                )
                for m in stack
            ]

        self._pi, self._v = copies(model.pi), copies(model.v)
        self._log_std = None if self.discrete else model.log_std.detach().clone()
        self._norm = None
        if model.obs_norm is not None:
            inv_std, mean = model.obs_norm.scale_shift()
            self._norm = (mean, inv_std, model.obs_norm.clip)

    def _forward(self, layers: list[Layer], x: Tensor) -> Tensor:
        for w, b in layers[:-1]:
            x = self._act(torch.addmm(b, x, w))
        w, b = layers[-1]
        return torch.addmm(b, x, w)

    def _features(self, obs: np.ndarray) -> Tensor:
        x = torch.from_numpy(obs).flatten(1)
        if x.dtype != torch.float32:
            x = x.float()
        if self._norm is not None:
            mean, inv_std, clip = self._norm
            x = ((x - mean) * inv_std).clamp_(-clip, clip)
        return x

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, logp, value) as numpy arrays for a batch of observations."""
        with torch.inference_mode():
            x = self._features(obs)
            out = self._forward(self._pi, x)
            value = self._forward(self._v, x).squeeze(-1)
            head = out if self.discrete else (out, self._log_std)
            action, logp = self.dist.sample(head)
            return action.numpy(), logp.numpy(), value.numpy()

    def value(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self._forward(self._v, self._features(obs)).squeeze(-1).numpy()

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The most likely action (the mean, for Gaussian policies), unclipped: for
        evaluation. Only the policy network runs."""
        with torch.inference_mode():
            out = self._forward(self._pi, self._features(obs))
            return self.dist.mode(out if self.discrete else (out, self._log_std)).numpy()
