"""One contiguous buffer for all of a module's parameters, one for their gradients, and Adam
over the pair.

At CartPole sizes (a 64-64 actor-critic) an SGD step is dominated by per-tensor
overhead, not arithmetic: `clip_grad_norm_` over every gradient, and
`torch.optim.Adam.step`, whose Python wrapper costs many times its fused kernel. With
every parameter a view into one buffer, gradient clipping is one norm and one multiply
and Adam is one fused kernel call on the flat tensors.

The module keeps working as before: its parameters are views into the buffer, so
`state_dict`, `load_state_dict`, forward passes and autograd (which accumulates into the
`.grad` views in place) all see and update the flat storage.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class FlatParameters:
    """Re-seats every parameter of `module` as a view into `self.data`, with its `.grad` a
    view into `self.grad`, in `named_parameters()` order. Both buffers are on the device
    the module's parameters are on (move the module first)."""

    def __init__(self, module: nn.Module) -> None:
        named = list(module.named_parameters())
        with torch.no_grad():
            self.data = torch.cat([p.detach().reshape(-1) for _, p in named])
        self.grad = torch.zeros_like(self.data)
        # (name, offset, shape) of each parameter in the buffers.
        self.layout: list[tuple[str, int, torch.Size]] = []
        offset = 0
        for name, p in named:
            n = p.numel()
            p.data = self.data[offset : offset + n].view_as(p)
            p.grad = self.grad[offset : offset + n].view_as(p)
            self.layout.append((name, offset, p.shape))
            offset += n

    def unflatten(self, buffer: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of a buffer laid out as `self.data` (e.g. its copy on the host), by
        parameter name."""
        return {
            name: buffer[offset : offset + shape.numel()].view(shape)
            for name, offset, shape in self.layout
        }

    def __len__(self) -> int:
        return self.data.numel()

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Scale all gradients so their global L2 norm is at most `max_norm` (the formula of
        `torch.nn.utils.clip_grad_norm_`); returns the norm before clipping, a 0-d tensor
        on the buffers' device (no host sync per SGD step on a GPU)."""
        norm = torch.linalg.vector_norm(self.grad)
        self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm


class FlatAdam:
    """Adam (Kingma & Ba 2015) on one flat parameter tensor: torch.optim.Adam's update (bias
    corrections, eps added after the square root) by the kernel that Adam(fused=True) runs,
    one call per step, without the optimizer's per-call bookkeeping. Its moments live on the
    parameters' device; its state_dict is on the host."""

    def __init__(
        self,
        params: torch.Tensor,
        grad: torch.Tensor,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params, self.grad = params, grad
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.steps = 0
        self.exp_avg = torch.zeros_like(params)
        self.exp_avg_sq = torch.zeros_like(params)
        # The step count as the kernel reads it (a tensor on the parameters' device).
        self._step_t = torch.zeros((), dtype=torch.float32, device=params.device)

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.steps += 1
        self._step_t.fill_(self.steps)
        # One kernel instead of seven tensor ops (lerp, mul, addcmul, sqrt, div, add,
        # addcdiv): at CartPole sizes each op's dispatch costs more than its arithmetic.
        # The same kernel on CPU and CUDA; torch.optim.Adam(fused=True) calls it so.
        torch._fused_adam_(
            [self.params], [self.grad], [self.exp_avg], [self.exp_avg_sq], [], [self._step_t],
            lr=lr, beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps,
            amsgrad=False, maximize=False,
        )  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {  # copies on the host: a checkpoint loads on any device
            "steps": self.steps,
            "exp_avg": self.exp_avg.to("cpu", copy=True),
            "exp_avg_sq": self.exp_avg_sq.to("cpu", copy=True),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "param_groups" in state:
            state = _from_torch_adam(state)  # a checkpoint written before FlatAdam
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        if exp_avg.shape != self.exp_avg.shape:
            raise ValueError(
                f"optimizer state holds {exp_avg.numel()} parameters, the policy has "
                f"{self.exp_avg.numel()}: the checkpoint is for another architecture"
            )
        self.steps = int(state["steps"])
        self.exp_avg.copy_(exp_avg)
        self.exp_avg_sq.copy_(exp_avg_sq)


def _from_torch_adam(state: dict[str, Any]) -> dict[str, Any]:
    """torch.optim.Adam's state for the same parameters, in the same order, as ours."""
    per_param = [state["state"][i] for i in state["param_groups"][0]["params"]]
    return {
        "steps": int(per_param[0]["step"]),
        "exp_avg": torch.cat([s["exp_avg"].reshape(-1) for s in per_param]),
        "exp_avg_sq": torch.cat([s["exp_avg_sq"].reshape(-1) for s in per_param]),
    }
