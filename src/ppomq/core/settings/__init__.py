"""The one settings model, in layers: defaults < preset < config file (TOML) < `PPOMQ_*`
variables < flags.

A field's name is its name everywhere: `--max-staleness` on the command line,
`PPOMQ_MAX_STALENESS` in the environment (compose, k8s), `max_staleness` in a config file
or a preset. Each service takes the groups it needs; a field is defined once, in its group.
A preset (`--preset mujoco`) is a TOML file of published hyper-parameters shipped in
ppomq/presets/, each value citing its source; anything set another way overrides it.
"""

# One job a module: _base (the prefix, the base group), presets (the TOML files in
# ppomq/presets/), groups (the settings models), layering (flags, env, config file, preset ->
# load_settings), secrets (secret settings, and what of them may be written down), docs
# (docs/reference/settings.md, `python -m ppomq.core.settings`). This package re-exports their
# names.

# ruff: noqa: F401 (re-exports; __all__ is the star-import list it always was)
from __future__ import annotations

from ppomq.core.settings._base import ENV_PREFIX, SettingsGroup
from ppomq.core.settings.docs import settings_table
from ppomq.core.settings.groups import (
    ActorLoopSettings,
    ActorSettings,
    CommonSettings,
    CurveClientSettings,
    CurveServerSettings,
    EnvSettings,
    LearnerSettings,
    PPOSettings,
    PresetSettings,
    RedisSettings,
    RunSettings,
    TrainSettings,
    TransportSettings,
    WeightserverSettings,
    WeightStoreSettings,
)
from ppomq.core.settings.layering import (
    S,
    add_settings_arguments,
    format_validation_error,
    load_settings,
    read_config,
    setting_names,
    settings_env,
)
from ppomq.core.settings.presets import (
    AUTO,
    NO_PRESET,
    auto_preset,
    pick_preset,
    preset_names,
    preset_summary,
    preset_text,
    read_preset,
)
from ppomq.core.settings.secrets import (
    REDACTED,
    SecretUrl,
    is_secret_field,
    plain,
    redact_text,
    redact_url,
    settings_snapshot,
)

__all__ = [
    "CommonSettings",
    "CurveClientSettings",
    "CurveServerSettings",
    "EnvSettings",
    "PresetSettings",
    "RedisSettings",
    "TransportSettings",
    "WeightStoreSettings",
    "WeightserverSettings",
    "add_settings_arguments",
    "is_secret_field",
    "load_settings",
    "plain",
    "preset_names",
    "preset_summary",
    "preset_text",
    "read_preset",
    "redact_text",
    "redact_url",
    "settings_env",
    "settings_snapshot",
]
