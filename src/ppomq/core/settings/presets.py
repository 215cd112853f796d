"""Presets: named sets of published hyper-parameters, one TOML file each in ppomq/presets/."""

from __future__ import annotations

import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from ppomq.core.errors import UsageError
from ppomq.core.settings._base import ENV_PREFIX


def _presets_dir() -> Traversable:
    return resources.files("ppomq") / "presets"


def preset_names() -> list[str]:
    """The presets shipped with ppomq: one `NAME.toml` each in ppomq/presets/."""
    return sorted(
        p.name.removesuffix(".toml") for p in _presets_dir().iterdir() if p.name.endswith(".toml")
    )


def unknown_preset(name: str) -> str:
    return f"unknown preset {name!r}; the presets are: {', '.join(preset_names())}"


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
