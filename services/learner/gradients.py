"""Gradients of the one PPO objective (ppo_loss.py) for a minibatch: (parameters, batch) ->
gradients, written into the flat gradient buffer that the optimizer (and, later, an
all-reduce over a learner group) reads.

`AutogradGradient` is the reference and works for any model. `select_gradient` picks the
hand-derived network backward of mlp_grad.py where the model is one it was derived for
(tests check it against this reference on every spec it accepts), and this otherwise.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple, Protocol

from torch import Tensor

from ppomq.core.errors import UsageError
from ppomq.core.models import Policy
from ppomq.learner import ppo_loss as objective
from ppomq.learner.flat_params import FlatParameters
from ppomq.learner.ppo_loss import PPOLossStats

log = logging.getLogger("ppomq.learner")


class Minibatch(NamedTuple):
    obs: Tensor  # [B, D]: model.preprocess of the raw observations
    actions: Tensor  # [B] int64 or [B, *action_shape] float
    old_logp: Tensor  # [B]
    old_values: Tensor  # [B]
    advantages: Tensor  # [B]
    returns: Tensor  # [B]


class SequenceMinibatch(NamedTuple):
    """Whole env sequences of a recurrent policy's update, env-major: one row per env."""

    obs: Tensor  # [B, T, ...]: model.preprocess of the raw observations
    actions: Tensor  # [B, T] int64 or [B, T, *action_shape] float
    old_logp: Tensor  # [B, T]
    old_values: Tensor  # [B, T]
    advantages: Tensor  # [B, T]
    returns: Tensor  # [B, T]
    starts: Tensor  # [B, T] bool: an episode starts at that step (the state is zeroed)
    state: Tensor  # [B, *H]: each row's state at step 0, the wire's hidden_state layout


class Gradient(Protocol):
    def __call__(self, mb: Minibatch, **coefs: Any) -> PPOLossStats: ...


class AutogradGradient:
    """`model.evaluate` + `ppo_loss` + `backward()`, for any differentiable model."""

    def __init__(self, model: Policy, flat: FlatParameters) -> None:
        self.model, self.flat = model, flat

    def __call__(self, mb: Minibatch, **coefs: Any) -> PPOLossStats:
        self.flat.grad.zero_()
        new_logp, entropy, new_values = self.model.evaluate(mb.obs, mb.actions)
        loss, stats = objective.ppo_loss(
            new_logp, mb.old_logp, mb.advantages, new_values, mb.old_values, mb.returns,
            entropy, **coefs,
        )  # fmt: skip
        loss.backward()
        return stats


class SequenceAutogradGradient:
    """A recurrent model's `evaluate_sequence` over whole rows from their step-0 state
    (truncated BPTT over the batch's T steps) + `ppo_loss` + `backward()`."""

    def __init__(self, model: Policy, flat: FlatParameters) -> None:
        self.model, self.flat = model, flat

    def __call__(self, mb: SequenceMinibatch, **coefs: Any) -> PPOLossStats:
        self.flat.grad.zero_()
        model = self.model
        new_logp, entropy, new_values = model.evaluate_sequence(
            mb.obs.transpose(0, 1), mb.actions.transpose(0, 1), mb.starts.transpose(0, 1),
            model.state_from_wire(mb.state),
        )  # fmt: skip

        def flat(t: Tensor) -> Tensor:  # [B, T] -> [B*T], the order of new_* transposed
            return t.reshape(-1)

        loss, stats = objective.ppo_loss(
            flat(new_logp.T), flat(mb.old_logp), flat(mb.advantages), flat(new_values.T),
            flat(mb.old_values), flat(mb.returns), flat(entropy.T), **coefs,
        )  # fmt: skip
        loss.backward()
        return stats


def select_gradient(choice: str, model: Policy, flat: FlatParameters) -> Gradient:
    """`autograd`; `analytic` (an error if the model is not one it was derived for); or
    `auto`: analytic where it applies, else autograd, said once in the log."""
    from ppomq.learner.mlp_grad import MLPGradient, unsupported_reason

    if getattr(model, "recurrent", False) and choice != "analytic":
        return SequenceAutogradGradient(model, flat)
    if choice == "autograd":
        return AutogradGradient(model, flat)
    reason = unsupported_reason(model)
    if reason is None:
        return MLPGradient(model)
    if choice == "analytic":
        raise UsageError(
            f"--gradients analytic cannot train this model ({reason}); "
            "use --gradients auto or autograd"
        )
    log.info("gradients: autograd (the analytic path does not apply: %s)", reason)
    return AutogradGradient(model, flat)
