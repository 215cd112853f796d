"""Presets: named sets of published hyper-parameters, one TOML file each in ppomq/presets/."""

from __future__ import annotations

import functools
import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from ppomq.core.errors import UsageError
from ppomq.core.settings._base import ENV_PREFIX

# Not files: `auto` picks a preset from the env's spaces (pick_preset), `none` (or an empty
# value) takes none, the built-in defaults (which are the cartpole preset's).
AUTO = "auto"
NO_PRESET = "none"


def _presets_dir() -> Traversable:
    return resources.files("ppomq") / "presets"


def preset_names() -> list[str]:
    """The presets shipped with ppomq: one `NAME.toml` each in ppomq/presets/."""
    return sorted(
        p.name.removesuffix(".toml") for p in _presets_dir().iterdir() if p.name.endswith(".toml")
    )


def unknown_preset(name: str) -> str:
    names = ", ".join(preset_names())
    return f"unknown preset {name!r}; the presets are: {names} (or {AUTO} or {NO_PRESET})"


def pick_preset(obs_space: Any, action_space: Any) -> tuple[str, str]:
    """What `--preset auto` takes for an env with these spaces, and why, in words: uint8
    image observations -> atari (CleanRL's Atari settings and the Nature CNN); continuous
    (Box) actions on vector observations -> mujoco (CleanRL's continuous-control
    settings); anything else -> none, the built-in defaults (tuned for CartPole-class
    tasks: vector observations, discrete actions)."""
    from gymnasium import spaces

    shape = tuple(int(d) for d in getattr(obs_space, "shape", None) or ())
    dtype = str(getattr(obs_space, "dtype", ""))
    if dtype == "uint8" and len(shape) >= 2:
        return "atari", f"uint8 image observations {shape}"
    discrete = isinstance(action_space, spaces.Discrete)
    if isinstance(action_space, spaces.Box) and len(shape) == 1:
        actions = tuple(int(d) for d in action_space.shape)
        return "mujoco", f"continuous actions {actions} on vector observations {shape}"
    actions = f"{int(action_space.n)} discrete actions" if discrete else "its actions"
    return NO_PRESET, f"{dtype} observations {shape} with {actions}"


@functools.lru_cache(maxsize=8)
def auto_preset(env_id: str) -> tuple[str, str]:
    """`pick_preset` for `env_id`, from one env made and closed to read its spaces; an
    unknown env, or one ppomq cannot train on, is a one-line UsageError. Kept per env id:
    a process that asks again (the launcher, the first line it prints) makes no env."""
    from ppomq.core.envs import spaces_of

    return pick_preset(*spaces_of(env_id))


def preset_text(name: str) -> str:
    """The TOML source of preset `name`, comments (the citations) included."""
    if name not in preset_names():  # also keeps a name from reaching outside presets/
        raise UsageError(f"{unknown_preset(name)} (--preset / {ENV_PREFIX}PRESET)")
    return (_presets_dir() / f"{name}.toml").read_text(encoding="utf-8")


def read_preset(name: str) -> dict[str, Any]:
    """Preset `name`'s settings by field name; an unknown name is a one-line UsageError."""
    return tomllib.loads(preset_text(name))


def preset_summary(name: str) -> str:
    """The first comment line of a preset file: what it is and where it comes from."""
    for line in preset_text(name).splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""
