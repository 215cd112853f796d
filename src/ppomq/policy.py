"""Actor-critic networks shared by the actor (inference) and the learner (training).

A model is rebuilt anywhere from its spec, a small JSON-able dict that travels in every
weights header, so an actor never needs to be told the architecture out of band.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from .proto import RolloutSpec


def model_spec_for(spec: RolloutSpec, hidden: list[int]) -> dict[str, Any]:
    """The architecture for a rollout spec: obs and action shapes plus hidden sizes."""
    out: dict[str, Any] = {
        "arch": "mlp",
        "obs_shape": list(spec.obs_shape),
        "action_kind": spec.action.kind,
        "hidden": list(hidden),
    }
    if spec.action.kind == "discrete":
        out["n_actions"] = spec.action.n
    else:
        out["action_shape"] = list(spec.action.shape)
    return out


def _layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    # Orthogonal init with these gains is one of PPO's "implementation details"
    # (Huang et al. 2022, detail 2); it matters for CartPole-speed learning.
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(n_in: int, hidden: list[int], n_out: int, out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [_layer(n_in, h), nn.Tanh()]
        n_in = h
    layers.append(_layer(n_in, n_out, out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Separate policy and value MLPs (CleanRL's ppo.py layout)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        self.spec = dict(spec)
        obs_dim = int(np.prod(spec["obs_shape"]))
        hidden = list(spec["hidden"])
        self.discrete = spec["action_kind"] == "discrete"
        self.critic = _mlp(obs_dim, hidden, 1, 1.0)
        if self.discrete:
            self.actor = _mlp(obs_dim, hidden, int(spec["n_actions"]), 0.01)
        else:
            act_dim = int(np.prod(spec["action_shape"]))
            self.actor = _mlp(obs_dim, hidden, act_dim, 0.01)
            self.log_std = nn.Parameter(torch.zeros(act_dim))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs.flatten(1)).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions for a batch of observations: (action, logp, value)."""
        x = obs.flatten(1)
        out = self.actor(x)
        value = self.critic(x).squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            # Gumbel-max sampling: one fused op, no torch.distributions overhead per step.
            gumbel = -torch.log(-torch.log(torch.rand_like(logp_all).clamp_(1e-20, 1.0)))
            action = torch.argmax(logp_all + gumbel, dim=-1)
            logp = logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        else:
            std = self.log_std.exp()
            action = out + std * torch.randn_like(out)
            logp = _normal_logp(action, out, self.log_std)
        return action, logp, value

    @torch.no_grad()
    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The most likely action (the mean, for continuous policies): for evaluation."""
        out = self.actor(obs.flatten(1))
        return out.argmax(-1) if self.discrete else out

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logp of `actions`, entropy, value) under the current parameters, with grad."""
        x = obs.flatten(1)
        out = self.actor(x)
        value = self.critic(x).squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            logp = _normal_logp(actions, out, self.log_std)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum().expand(len(x))
        return logp, entropy, value


class InferencePolicy:
    """The actor's hot path: the same maths as `ActorCritic.act`, without nn.Module calls.

    Module dispatch costs more than the arithmetic at actor batch sizes (8 x 4 inputs:
    149 us per step through nn.Sequential, 55 us as plain addmm/tanh; see
    benchmarks/README). Built from a policy after each weights load; numpy in, numpy out.
    """

    def __init__(self, policy: ActorCritic) -> None:
        self.discrete = policy.discrete
        self._actor = self._layers(policy.actor)
        self._critic = self._layers(policy.critic)
        self._log_std = None if self.discrete else policy.log_std.detach().clone()

    @staticmethod
    def _layers(seq: nn.Sequential) -> list[tuple[torch.Tensor, torch.Tensor]]:
        # Copies, never views (.contiguous() alone returns a view for a [1, H] head), so
        # loading newer weights into the module never changes a policy in use.
        return [
            (
                m.weight.detach().t().clone(memory_format=torch.contiguous_format),
                m.bias.detach().clone(),
            )
            for m in seq
            if isinstance(m, nn.Linear)
        ]

    @staticmethod
    def _forward(layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
        for w, b in layers[:-1]:
            x = torch.tanh(torch.addmm(b, x, w))
        w, b = layers[-1]
        return torch.addmm(b, x, w)

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, logp, value) as numpy arrays for a batch of observations."""
        with torch.inference_mode():
            x = torch.from_numpy(obs).flatten(1)
            if x.dtype != torch.float32:
                x = x.float()
            out = self._forward(self._actor, x)
            value = self._forward(self._critic, x).squeeze(-1)
            if self.discrete:
                logp_all = torch.log_softmax(out, dim=-1)
                gumbel = -torch.log(-torch.log(torch.rand_like(logp_all).clamp_(1e-20, 1.0)))
                action = torch.argmax(logp_all + gumbel, dim=-1)
                logp = logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
            else:
                action = out + self._log_std.exp() * torch.randn_like(out)
                logp = _normal_logp(action, out, self._log_std)
            return action.numpy(), logp.numpy(), value.numpy()

    def value(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            x = torch.from_numpy(obs).flatten(1)
            if x.dtype != torch.float32:
                x = x.float()
            return self._forward(self._critic, x).squeeze(-1).numpy()


def _normal_logp(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    var = torch.exp(2 * log_std)
    return (-((x - mean) ** 2) / (2 * var) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def numpy_state(policy: nn.Module) -> dict[str, np.ndarray]:
    """Parameters as float32 numpy arrays (views when possible), ready for pack_weights."""
    return {k: v.detach().cpu().numpy() for k, v in policy.state_dict().items()}


def load_numpy_state(policy: nn.Module, tensors: dict[str, np.ndarray]) -> None:
    """Copy received arrays into the policy in place (the arrays may be read-only views)."""
    with torch.no_grad():
        for name, param in policy.state_dict().items():
            param.copy_(torch.from_numpy(np.asarray(tensors[name]).copy()))
