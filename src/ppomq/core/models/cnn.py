"""`arch: "nature-cnn"`: the Nature DQN convolutional trunk (Mnih et al. 2015) shared by a
policy head and a value head, exactly as CleanRL's ppo_atari.py builds it (same layers,
same orthogonal initialization). Observations are uint8 pixels [C, H, W] (a stack of C
frames), scaled by 1/255 inside the network, or, with `obs_norm` (`--norm-obs`), normalized
pixel by pixel by their running mean and variance, as Sample Factory's `normalize_input`
does. proto/WEIGHTS.md specifies it completely.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ppomq.core.models.actor_critic import ActorCritic
from ppomq.core.models.distributions import ActionDistribution, distribution_for
from ppomq.core.models.obs_norm import ObsNormalizer, check_obs_norm
from ppomq.core.models.spec import ModelSpecError, check_action, check_int_list

# (out channels, kernel, stride) of each convolution; no padding, ReLU after each.
CONVS: tuple[tuple[int, int, int], ...] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
FEATURES = 512  # the fully connected layer after the convolutions
SCALE = 255.0  # pixels are divided by this before the first convolution


def conv_out(size: int) -> int:
    """The side of the last convolution's output for an input side `size` (< 1: too small)."""
    for _, kernel, stride in CONVS:
        size = (size - kernel) // stride + 1 if size >= kernel else 0
    return size


MIN_SIDE = next(s for s in range(1, 1000) if conv_out(s) >= 1)  # 36


def check_spec(spec: dict[str, Any]) -> None:
    check_int_list(spec, "obs_shape", minimum=1, non_empty=True)
    check_action(spec)
    shape = tuple(spec["obs_shape"])
    if len(shape) != 3 or min(shape[1:]) < MIN_SIDE:
        raise ModelSpecError(
            f"nature-cnn takes observations [C, H, W] (channels first) with H, W >= {MIN_SIDE} "
            f"(8x8/4, 4x4/2, 3x3/1 convolutions); got {shape}"
        )
    check_obs_norm(spec)


def pixel_normalizer(spec: dict[str, Any]) -> ObsNormalizer | None:
    """The per-pixel normalizer a spec with `obs_norm` asks for (over C·H·W), else None."""
    norm = spec.get("obs_norm")
    if not norm:
        return None
    return ObsNormalizer(math.prod(spec["obs_shape"]), clip=norm["clip"], epsilon=norm["epsilon"])


def pixels_in(obs: Tensor, norm: ObsNormalizer | None, dtype: torch.dtype) -> Tensor:
    """Raw pixels [B, C, H, W] -> the first convolution's input: scaled by 1/255, or
    normalized pixel by pixel when the model has a normalizer."""
    x = obs.to(dtype)
    if norm is None:
        return x / SCALE
    return norm(x.flatten(1)).view_as(x)


def _init(layer: nn.Conv2d | nn.Linear, gain: float) -> nn.Module:
    # CleanRL's layer_init: orthogonal weights (over the flattened [out, in*kh*kw] matrix
    # for a convolution), zero biases.
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class NatureCNN(ActorCritic):
    """Tensors: `conv.{0,1,2}.weight|bias` (OIHW), `fc.weight|bias`, `pi.weight|bias`,
    `v.weight|bias`, and `log_std` (Gaussian actions only)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        check_spec(spec)
        self.spec = dict(spec)
        self.obs_shape = tuple(int(d) for d in spec["obs_shape"])
        self.dist: ActionDistribution = distribution_for(spec["action"])
        self.discrete = self.dist.discrete
        self.obs_norm = pixel_normalizer(spec)  # None: pixels are scaled by 1/255 instead
        channels, height, width = self.obs_shape
        convs = []
        for out, kernel, stride in CONVS:
            convs.append(_init(nn.Conv2d(channels, out, kernel, stride), math.sqrt(2)))
            channels = out
        self.conv = nn.ModuleList(convs)
        self.flat_dim = channels * conv_out(height) * conv_out(width)
        self.fc = _init(nn.Linear(self.flat_dim, FEATURES), math.sqrt(2))
        n_out = self.dist.n if self.discrete else self.dist.dim
        self.pi = _init(nn.Linear(FEATURES, n_out), 0.01)
        self.v = _init(nn.Linear(FEATURES, 1), 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(n_out))

    def preprocess(self, obs: Tensor) -> Tensor:
        """The raw observations unchanged (uint8 stays uint8: a quarter of float32's bytes
        for the learner's per-epoch shuffles); `forward` scales them."""
        if tuple(obs.shape[1:]) != self.obs_shape:
            raise ModelSpecError(
                f"nature-cnn built for observations {self.obs_shape}, got {tuple(obs.shape[1:])}"
            )
        return obs

    def features(self, obs: Tensor) -> Tensor:
        """The shared trunk: raw pixels [B, C, H, W] -> features [B, 512]."""
        x = pixels_in(obs, self.obs_norm, self.fc.weight.dtype)
        if x.device.type == "cpu":
            # oneDNN's convolutions, the learner's backward above all, run faster on
            # channels-last input (benchmarks/results/cnn_update.md); the weights stay NCHW.
            x = x.contiguous(memory_format=torch.channels_last)
        for conv in self.conv:
            x = torch.relu(conv(x))
        return torch.relu(self.fc(x.flatten(1)))

    def head_of(self, pi_out: Tensor) -> Any:
        return pi_out if self.discrete else (pi_out, self.log_std)

    def forward(self, x: Tensor) -> tuple[Any, Tensor]:
        """(distribution parameters, value [B]) from raw (preprocessed) observations."""
        h = self.features(x)
        return self.head_of(self.pi(h)), self.v(h).squeeze(-1)

    def inference(self) -> CNNInference:
        return CNNInference(self)


class CNNInference:
    """The actor's hot path: numpy uint8 [N, C, H, W] in, numpy out, without nn.Module
    calls, on copies of the weights (loading newer weights into the module must not change
    a policy in use).

    The path was chosen by `python -m benchmarks.cnn_forward` (benchmarks/results/
    cnn_forward.md; about a fifth faster than the module at N = 8 with one thread): plain
    NCHW float32 `conv2d`s and `addmm`s under inference_mode, ReLU in place, the fc weight
    pre-transposed (nn.Linear's [out, in] matmul was the slower one), the 1/255 folded into
    conv.0's weights (equal to the module's forward to ~1e-6, not bit for bit; with
    `obs_norm` the pixels are normalized instead, which clipping keeps out of the weights) and the
    policy and value heads fused into one matmul. channels-last, TorchScript and
    torch.compile were no faster; bfloat16 was, but is not the learner's policy (~1e-2).
    """

    def __init__(self, model: NatureCNN) -> None:
        self.dist = model.dist
        self.discrete = model.discrete
        self.obs_shape = model.obs_shape
        with torch.no_grad():
            self._convs = [
                (c.weight.detach().clone(), c.bias.detach().clone(), c.stride) for c in model.conv
            ]
            self._norm: tuple[Tensor, Tensor, float] | None = None
            if model.obs_norm is not None:
                inv_std, mean = model.obs_norm.scale_shift()
                shape = model.obs_shape
                self._norm = (mean.view(shape), inv_std.view(shape), model.obs_norm.clip)
            else:
                self._convs[0][0].div_(SCALE)  # conv(x / 255, W) = conv(x, W / 255)
            self._fc = (model.fc.weight.detach().t().contiguous(), model.fc.bias.detach().clone())
            # The two heads as one [512, n_out + 1] matmul: columns :n_out are the policy's.
            self._heads = (
                torch.cat([model.pi.weight, model.v.weight]).detach().t().contiguous(),
                torch.cat([model.pi.bias, model.v.bias]).detach().clone(),
            )
        self._log_std = None if self.discrete else model.log_std.detach().clone()

    def _outputs(self, obs: np.ndarray) -> tuple[Any, Tensor]:
        x = torch.from_numpy(obs)
        if tuple(x.shape[1:]) != self.obs_shape:
            raise ModelSpecError(
                f"nature-cnn built for observations {self.obs_shape}, got {tuple(x.shape[1:])}"
            )
        x = x.to(torch.float32)
        if self._norm is not None:
            mean, inv_std, clip = self._norm
            x = ((x - mean) * inv_std).clamp_(-clip, clip)
        for w, b, stride in self._convs:
            x = torch.relu_(F.conv2d(x, w, b, stride))
        w, b = self._fc
        h = torch.relu_(torch.addmm(b, x.flatten(1), w))
        w, b = self._heads
        out = torch.addmm(b, h, w)
        pi, value = out[:, :-1], out[:, -1]
        return (pi if self.discrete else (pi, self._log_std)), value

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, logp, value) as numpy arrays for a batch of observations."""
        with torch.inference_mode():
            head, value = self._outputs(obs)
            action, logp = self.dist.sample(head)
            return action.numpy(), logp.numpy(), value.numpy()

    def value(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return self._outputs(obs)[1].numpy()

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The most likely action (the mean, for Gaussian policies), unclipped."""
        with torch.inference_mode():
            return self.dist.mode(self._outputs(obs)[0]).numpy()
