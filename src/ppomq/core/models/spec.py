"""The `model` map of the weights header: how it is derived for an env, and checked.

proto/WEIGHTS.md ("Models") is the specification; this is its reference reader/writer.
"""

from __future__ import annotations

from typing import Any

from ppomq.core.errors import UsageError
from ppomq.proto import RolloutSpec

# The keys every model spec has, whatever its arch.
COMMON_KEYS = ("arch", "obs_shape", "action")


class ModelSpecError(UsageError):
    """A model spec no registered model can be built from."""


def is_image(spec: RolloutSpec) -> bool:
    """uint8 observations [C, H, W]: stacked frames, for a convolutional network."""
    return spec.obs_dtype == "uint8" and len(spec.obs_shape) == 3


def model_spec_for(
    spec: RolloutSpec,
    *,
    arch: str | None = None,
    hidden: list[int],
    activation: str = "tanh",
    norm_obs: bool = False,
    obs_clip: float = 10.0,
    obs_epsilon: float = 1e-8,
    lstm_size: int = 128,
) -> dict[str, Any]:
    """The model spec for the spaces of a rollout spec and the network settings. `arch`
    None (or "auto") picks by observation: `nature-cnn` for images (uint8 [C, H, W]), else
    `mlp`; `lstm` puts an LSTM of `lstm_size` on the encoder that observation would get.
    `hidden` and `activation` are the MLP's (the CNN's layers are fixed)."""
    space = spec.action
    if space.kind == "discrete":
        action: dict[str, Any] = {"kind": "categorical", "n": int(space.n)}
    else:
        action = {"kind": "gaussian", "shape": [int(d) for d in space.shape]}
    obs_shape = [int(d) for d in spec.obs_shape]
    image = is_image(spec)
    if arch in (None, "auto"):
        arch = "nature-cnn" if image else "mlp"
    if arch == "lstm":
        encoder = "nature-cnn" if image else "mlp"
        inner = model_spec_for(
            spec, arch=encoder, hidden=hidden, activation=activation, norm_obs=norm_obs,
            obs_clip=obs_clip, obs_epsilon=obs_epsilon,
        )  # fmt: skip
        return {**inner, "arch": "lstm", "encoder": encoder, "lstm_size": int(lstm_size)}
    norm = {"clip": float(obs_clip), "epsilon": float(obs_epsilon)} if norm_obs else None
    if arch == "nature-cnn":
        # obs_norm only when asked: the spec without it is the one every checkpoint has.
        return {"arch": arch, "obs_shape": obs_shape, "action": action} | (
            {"obs_norm": norm} if norm else {}
        )
    return {
        "arch": arch,
        "obs_shape": obs_shape,
        "action": action,
        "hidden": [int(h) for h in hidden],
        "activation": activation,
        "obs_norm": norm,
    }


def check_int_list(
    spec: dict[str, Any], key: str, *, minimum: int, non_empty: bool = False
) -> None:
    value = spec.get(key)
    if not (
        isinstance(value, list)
        and (value or not non_empty)
        and all(type(v) is int and v >= minimum for v in value)
    ):
        raise ModelSpecError(f"model spec {key} must be a list of ints >= {minimum}, not {value!r}")


def check_action(spec: dict[str, Any]) -> None:
    action = spec.get("action")
    if isinstance(action, dict) and action.get("kind") == "categorical":
        if type(action.get("n")) is int and action["n"] >= 1:
            return
    elif isinstance(action, dict) and action.get("kind") == "gaussian":
        check_int_list(action, "shape", minimum=1)
        return
    raise ModelSpecError(
        f"model spec action {action!r} is not {{kind: categorical, n}} or {{kind: gaussian, shape}}"
    )
