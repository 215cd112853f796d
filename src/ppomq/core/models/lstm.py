"""`arch: "lstm"`: an encoder, one LSTM layer, and a policy and a value head on its output:
CleanRL's ppo_atari_lstm.py layout (a trunk shared by both heads), with either encoder:

- `encoder: "mlp"` for vector observations: Linear + activation layers of `hidden` sizes
  (the MLP arch's hidden layers, orthogonal gain sqrt 2), its last layer's output the
  features (the observations themselves when `hidden` is empty); optional `obs_norm`;
- `encoder: "nature-cnn"` for pixels: the Nature CNN's trunk (nature-cnn's `conv` and `fc`,
  512 features, pixels scaled by 1/255 inside).

Recurrent state: (h, c), each [B, lstm_size], carried per env from step to step and from
rollout to rollout, and set to zeros where an episode starts (before the step's input goes
in, as CleanRL multiplies it by 1 - done). On the wire it is `hidden_state` [N, 2,
lstm_size] (h then c), the state at step 0 of a batch (proto/ROLLOUT.md); within a batch an
episode starts at t > 0 where step t - 1 terminated or was truncated. proto/WEIGHTS.md
specifies the network tensor by tensor.
"""

from __future__ import annotations

import copy
import math
from itertools import pairwise
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ppomq.core.models.cnn import CONVS, FEATURES, conv_out, pixel_normalizer, pixels_in
from ppomq.core.models.cnn import check_spec as check_cnn_spec
from ppomq.core.models.distributions import ActionDistribution, distribution_for
from ppomq.core.models.mlp import ACTIVATIONS
from ppomq.core.models.mlp import check_spec as check_mlp_spec
from ppomq.core.models.obs_norm import ObsNormalizer
from ppomq.core.models.spec import ModelSpecError

ENCODERS = ("mlp", "nature-cnn")
State = tuple[Tensor, Tensor]  # (h, c), each [B, lstm_size]


def check_spec(spec: dict[str, Any]) -> None:
    encoder = spec.get("encoder")
    if encoder not in ENCODERS:
        raise ModelSpecError(f"lstm encoder {encoder!r} is not one of {', '.join(ENCODERS)}")
    size = spec.get("lstm_size")
    if type(size) is not int or size < 1:
        raise ModelSpecError(f"lstm_size must be an int >= 1, not {size!r}")
    if encoder == "mlp":
        check_mlp_spec(spec)
    else:
        check_cnn_spec(spec)


def _init(layer: nn.Module, gain: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class LSTMActorCritic(nn.Module):
    """Tensors: the encoder's (`enc.{i}.weight|bias` for mlp; `conv.{0,1,2}`, `fc` for
    nature-cnn), `lstm.weight_ih_l0|weight_hh_l0|bias_ih_l0|bias_hh_l0` (torch's LSTM
    layout, gates i, f, g, o), `pi.weight|bias`, `v.weight|bias`, `log_std` (Gaussian
    actions only), `obs_norm.mean|var|count` (mlp encoder with obs_norm)."""

    recurrent = True

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        check_spec(spec)
        self.spec = dict(spec)
        self.encoder = str(spec["encoder"])
        self.obs_shape = tuple(int(d) for d in spec["obs_shape"])
        self.dist: ActionDistribution = distribution_for(spec["action"])
        self.discrete = self.dist.discrete
        self.lstm_size = int(spec["lstm_size"])
        self.obs_norm: ObsNormalizer | None = None
        if self.encoder == "mlp":
            self._act = ACTIVATIONS[str(spec["activation"])]
            n_in = math.prod(self.obs_shape)
            norm = spec.get("obs_norm")
            if norm:
                self.obs_norm = ObsNormalizer(n_in, clip=norm["clip"], epsilon=norm["epsilon"])
            sizes = [n_in, *spec["hidden"]]
            self.enc = nn.ModuleList(
                [_init(nn.Linear(a, b), math.sqrt(2)) for a, b in pairwise(sizes)]
            )
            n_features = sizes[-1]
        else:
            self.obs_norm = pixel_normalizer(spec)
            channels, height, width = self.obs_shape
            convs = []
            for out, kernel, stride in CONVS:
                convs.append(_init(nn.Conv2d(channels, out, kernel, stride), math.sqrt(2)))
                channels = out
            self.conv = nn.ModuleList(convs)
            flat = channels * conv_out(height) * conv_out(width)
            self.fc = _init(nn.Linear(flat, FEATURES), math.sqrt(2))
            n_features = FEATURES
        self.lstm = nn.LSTM(n_features, self.lstm_size)
        for name, param in self.lstm.named_parameters():  # CleanRL's ppo_atari_lstm init
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            else:
                nn.init.orthogonal_(param, 1.0)
        n_out = self.dist.n if self.discrete else self.dist.dim
        self.pi = _init(nn.Linear(self.lstm_size, n_out), 0.01)
        self.v = _init(nn.Linear(self.lstm_size, 1), 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(n_out))

    # -- shapes ------------------------------------------------------------------------
    @property
    def state_shape(self) -> tuple[int, int]:
        """The per-env recurrent state on the wire: (h, c) stacked, [2, lstm_size]."""
        return (2, self.lstm_size)

    def initial_state(self, batch: int) -> State:
        w = self.pi.weight
        zeros = torch.zeros(batch, self.lstm_size, dtype=w.dtype, device=w.device)
        return zeros, zeros.clone()

    @staticmethod
    def state_to_wire(state: State) -> np.ndarray:
        """(h, c) -> float32 [B, 2, lstm_size]."""
        return torch.stack(state, dim=1).detach().cpu().float().numpy()

    def state_from_wire(self, array: np.ndarray | Tensor) -> State:
        t = torch.as_tensor(array, dtype=self.pi.weight.dtype, device=self.pi.weight.device)
        return t[:, 0].contiguous(), t[:, 1].contiguous()

    # -- the network -------------------------------------------------------------------
    def preprocess(self, obs: Tensor) -> Tensor:
        """Raw observations [B, *obs_shape] -> the encoder's input (as the arch of its
        encoder does: mlp flattens to float and normalizes; nature-cnn keeps uint8)."""
        if tuple(obs.shape[1:]) != self.obs_shape:
            raise ModelSpecError(
                f"lstm built for observations {self.obs_shape}, got {tuple(obs.shape[1:])}"
            )
        if self.encoder == "nature-cnn":
            return obs
        x = obs.flatten(1)
        if x.dtype != self.pi.weight.dtype:
            x = x.to(self.pi.weight.dtype)
        return self.obs_norm(x) if self.obs_norm is not None else x

    def features(self, x: Tensor) -> Tensor:
        """Preprocessed inputs [B, ...] -> encoder features [B, F]."""
        if self.encoder == "nature-cnn":
            x = pixels_in(x, self.obs_norm, self.fc.weight.dtype)
            for conv in self.conv:
                x = torch.relu(conv(x))
            return torch.relu(self.fc(x.flatten(1)))
        for layer in self.enc:
            x = self._act(layer(x))
        return x

    def core(self, feats: Tensor, starts: Tensor, state: State) -> tuple[Tensor, State]:
        """The LSTM over features [T, B, F] from `state`, zeroed at each `starts` [T, B]
        (True: an episode starts at that step) -> outputs [T, B, H], final state.

        Between two steps where some row starts an episode the state flows unchanged, so
        the LSTM runs over each such segment in one call (its own loop over time, in C++)
        rather than one call per step; the rows that start at a segment's first step have
        their state zeroed before it. Equal to stepping one step at a time."""
        h, c = state
        steps = feats.shape[0]
        cuts = torch.nonzero(starts[1:].any(dim=1)).flatten().add(1).tolist()
        outs = []
        for a, b in pairwise([0, *cuts, steps]):
            keep = (~starts[a]).to(h.dtype).unsqueeze(-1)  # [B, 1]
            out, (h1, c1) = self.lstm(feats[a:b], ((h * keep)[None], (c * keep)[None]))
            h, c = h1[0], c1[0]
            outs.append(out)
        return (outs[0] if len(outs) == 1 else torch.cat(outs)), (h, c)

    def head_of(self, pi_out: Tensor) -> Any:
        return pi_out if self.discrete else (pi_out, self.log_std)

    def forward_sequence(
        self, x: Tensor, starts: Tensor, state: State
    ) -> tuple[Any, Tensor, State]:
        """Preprocessed inputs [T, B, ...] -> (distribution parameters [T, B, ...],
        values [T, B], final state)."""
        steps, batch = x.shape[:2]
        feats = self.features(x.reshape(steps * batch, *x.shape[2:]))
        out, final = self.core(feats.reshape(steps, batch, -1), starts, state)
        return self.head_of(self.pi(out)), self.v(out).squeeze(-1), final

    def evaluate_sequence(
        self, x: Tensor, actions: Tensor, starts: Tensor, state: State
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(logp of `actions`, entropy, value), each [T, B], with grad: the learner's
        objective over whole sequences, the state recomputed from the batch's first."""
        head, value, _ = self.forward_sequence(x, starts, state)
        flat_head = (
            head.reshape(-1, head.shape[-1])
            if self.discrete
            else (head[0].reshape(-1, head[0].shape[-1]), head[1])
        )
        flat_actions = actions.reshape(-1) if self.discrete else actions.reshape(-1, self.dist.dim)
        logp, entropy = self.dist.log_prob_entropy(flat_head, flat_actions)
        return logp.reshape(value.shape), entropy.reshape(value.shape), value

    @torch.no_grad()
    def act(
        self, obs: Tensor, starts: Tensor, state: State
    ) -> tuple[Tensor, Tensor, Tensor, State]:
        """One step for a batch of envs: (action, logp, value, next state)."""
        head, value, final = self.forward_sequence(self.preprocess(obs)[None], starts[None], state)
        head = head[0] if self.discrete else (head[0][0], head[1])
        action, logp = self.dist.sample(head)
        return action, logp, value[0], final

    def inference(self) -> LSTMInference:
        return LSTMInference(self)


class LSTMFunctional:
    """One step of an LSTMActorCritic as plain calls on copies of its weights (addmm for
    the mlp encoder's layers, torch.lstm_cell, one addmm for both heads): what the module
    computes, without module dispatch, which costs more than the arithmetic at actor batch
    sizes (benchmarks/lstm_forward.py). Copies, never views: loading newer weights into the
    module must not change a policy in use."""

    def __init__(self, model: LSTMActorCritic) -> None:
        m = copy.deepcopy(model).eval()
        for p in m.parameters():
            p.requires_grad_(False)
        self._model = m
        self.discrete = m.discrete
        self._act = m._act if m.encoder == "mlp" else None
        self._enc = (
            [(layer.weight.t().contiguous(), layer.bias) for layer in m.enc]
            if m.encoder == "mlp"
            else None
        )
        lstm = m.lstm
        self._cell = (lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0)
        self._heads_w = torch.cat([m.pi.weight, m.v.weight]).t().contiguous()
        self._heads_b = torch.cat([m.pi.bias, m.v.bias])
        self._log_std = None if self.discrete else m.log_std

    def outputs(
        self, obs: np.ndarray, starts: np.ndarray, state: np.ndarray
    ) -> tuple[Any, Tensor, Tensor]:
        """(distribution parameters, value [N], next state [N, 2, L]) for one step."""
        m = self._model
        x = m.preprocess(torch.from_numpy(np.asarray(obs)))
        if self._enc is not None:
            for w, b in self._enc:
                x = self._act(torch.addmm(b, x, w))
        else:
            x = m.features(x)
        s = torch.from_numpy(np.asarray(state))
        h, c = s[:, 0], s[:, 1]
        starts = np.asarray(starts, dtype=bool)
        if starts.any():
            keep = torch.from_numpy(~starts).to(h.dtype).unsqueeze(-1)
            h, c = h * keep, c * keep
        h, c = torch.lstm_cell(x, (h, c), *self._cell)
        out = torch.addmm(self._heads_b, h, self._heads_w)
        pi_out, value = out[:, :-1], out[:, -1]
        head = pi_out if self.discrete else (pi_out, self._log_std)
        return head, value, torch.stack((h, c), dim=1)


class LSTMInference:
    """The actor's and the evaluation's recurrent policy: numpy in and out, the state a
    float32 array [N, 2, lstm_size] (the wire's `hidden_state` layout) that the caller
    carries from step to step; `starts` [N] bool zeroes a row's state before its step.
    Steps with LSTMFunctional (the fastest correct path, benchmarks/lstm_forward.py)."""

    recurrent = True

    def __init__(self, model: LSTMActorCritic) -> None:
        self._step = LSTMFunctional(model).outputs
        self.dist = model.dist
        self.discrete = model.discrete
        self.state_shape = model.state_shape

    def initial_state(self, num_envs: int) -> np.ndarray:
        return np.zeros((num_envs, *self.state_shape), dtype=np.float32)

    def act(
        self, obs: np.ndarray, starts: np.ndarray, state: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(action, logp, value, next state) for one step of N envs."""
        with torch.inference_mode():
            head, value, nxt = self._step(obs, starts, state)
            action, logp = self.dist.sample(head)
            return action.numpy(), logp.numpy(), value.numpy(), nxt.numpy()

    def value(self, obs: np.ndarray, starts: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The value of `obs` reached from `state`; the state is not advanced."""
        with torch.inference_mode():
            return self._step(obs, starts, state)[1].numpy()

    def greedy(
        self, obs: np.ndarray, starts: np.ndarray, state: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(the most likely action, next state): for evaluation."""
        with torch.inference_mode():
            head, _, nxt = self._step(obs, starts, state)
            return self.dist.mode(head).numpy(), nxt.numpy()
