"""The PPO gradient for `arch: mlp` models with the network's backward pass derived by hand.

At the sizes PPO's MLPs have, autograd's per-op bookkeeping through the two networks
costs more than their arithmetic: a whole update of the default run (cartpole preset,
1 torch thread) is faster this way, with FlatAdam, than with autograd and
torch.optim.Adam(fused=True), by the ratio `python -m benchmarks.mlp_gradient` measures
(benchmarks/results/mlp_gradient.md). It stays while that ratio is at least 1.3. Only the chain
rule through the Linear layers and their activation is written here. Everything from the
networks' outputs onwards — the distribution's log-probability and entropy
(models/distributions.py) and the objective (ppo_loss.py) — is the same code the
reference runs, differentiated by autograd over [B]-sized tensors: the objective exists
once. tests/learner/test_mlp_grad.py checks every accepted spec against AutogradGradient.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ppomq.core.models import Policy
from ppomq.core.models.mlp import MLPActorCritic
from ppomq.learner import ppo_loss as objective
from ppomq.learner.gradients import Minibatch
from ppomq.learner.ppo_loss import PPOLossStats

Layer = tuple[Tensor, Tensor]  # (weight [out, in], bias [out])

# Activation derivatives from the activation's output h (what the forward pass keeps):
# the kernels autograd's own TanhBackward and ReluBackward call, d * (1 - h^2) and
# d * (h > 0), each one op.
_DERIVATIVE_FROM_OUTPUT = {
    "tanh": torch.ops.aten.tanh_backward,
    "relu": lambda d, h: torch.ops.aten.threshold_backward(d, h, 0),
}


def unsupported_reason(model: Policy) -> str | None:
    """None if this path computes `model`'s gradient exactly, else why it does not."""
    if type(model) is not MLPActorCritic:
        return f"derived for arch mlp only, not {model.spec.get('arch')!r}"
    if model.activation not in _DERIVATIVE_FROM_OUTPUT:
        return f"no derivative for activation {model.activation!r}"
    return None


def mlp_forward(x: Tensor, layers: list[Layer], act: Any) -> tuple[list[Tensor], Tensor]:
    """(hidden activations, output) of activation(Linear) layers and a linear output."""
    hidden = []
    for w, b in layers[:-1]:
        x = act(torch.addmm(b, x, w.t()))
        hidden.append(x)
    w, b = layers[-1]
    return hidden, torch.addmm(b, x, w.t())


def mlp_backward(
    x: Tensor, hidden: list[Tensor], d_out: Tensor, layers: list[Layer], activation: str
) -> None:
    """Backpropagate d loss / d output [B, out] into each layer's `.grad` (views into the
    flat gradient buffer), overwriting it."""
    derivative = _DERIVATIVE_FROM_OUTPUT[activation]
    inputs = [x, *hidden]
    d = d_out
    for i in range(len(layers) - 1, -1, -1):
        w, b = layers[i]
        torch.mm(d.t(), inputs[i], out=w.grad)
        torch.sum(d, 0, out=b.grad)
        if i == 0:
            return
        d = derivative(d @ w, inputs[i])


class MLPGradient:
    """Writes d loss / d parameters of an MLPActorCritic into its `.grad` slots, which must
    exist and stay put (FlatParameters makes them views into one buffer)."""

    def __init__(self, model: MLPActorCritic) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(reason)
        if any(p.grad is None for p in model.parameters()):
            raise ValueError("MLPGradient needs the gradient slots of FlatParameters")
        self.model = model
        self.pi, self.v = model.layers()

    def __call__(self, mb: Minibatch, **coefs: Any) -> PPOLossStats:
        model = self.model
        with torch.no_grad():
            x = mb.obs
            pi_hidden, pi_out = mlp_forward(x, self.pi, model._act)
            v_hidden, v_out = mlp_forward(x, self.v, model._act)
        # Autograd from the networks' outputs on: the distribution and the objective.
        pi_out.requires_grad_()
        v_out.requires_grad_()
        leaves = [pi_out, v_out]
        if not model.discrete:
            log_std = model.log_std.detach().requires_grad_()
            leaves.append(log_std)
            head: Any = (pi_out, log_std)
        else:
            head = pi_out
        with torch.enable_grad():
            new_logp, entropy = model.dist.log_prob_entropy(head, mb.actions)
            loss, stats = objective.ppo_loss(
                new_logp, mb.old_logp, mb.advantages, v_out.squeeze(-1), mb.old_values,
                mb.returns, entropy, **coefs,
            )  # fmt: skip
            grads = torch.autograd.grad(loss, leaves)
        with torch.no_grad():
            if not model.discrete:
                model.log_std.grad.copy_(grads[2])
            mlp_backward(x, pi_hidden, grads[0], self.pi, model.activation)
            mlp_backward(x, v_hidden, grads[1], self.v, model.activation)
        return stats
