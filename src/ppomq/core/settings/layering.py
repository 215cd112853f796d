"""Layering: defaults < preset < config file (TOML) < `PPOMQ_*` variables < flags."""

from __future__ import annotations

import argparse
import difflib
import os
import tomllib
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, CliSettingsSource

from ppomq.core.errors import UsageError
from ppomq.core.settings._base import ENV_PREFIX, SettingsGroup
from ppomq.core.settings.presets import AUTO, NO_PRESET, auto_preset, read_preset
from ppomq.core.settings.secrets import REDACTED, is_secret_field, plain, shown
from ppomq.core.settings.topics import settings_by_topic

S = TypeVar("S", bound=BaseSettings)


def add_settings_arguments(
    parser: argparse.ArgumentParser, cls: type[BaseSettings]
) -> CliSettingsSource[Any]:
    """`--config` and one `--kebab-name` flag per field (`--x/--no-x` for a bool), each
    documented with its variable and default; pydantic-settings' CLI source writes them,
    and `--help` shows them by topic, the common ones first (settings_by_topic).

    Unset flags stay absent, so that lower layers (env, config file, defaults) show through.
    `source(parsed_args=args)()` gives the flags that were given, by field name.
    """
    # The usage line would list every flag (forty lines for `ppomq train`): the groups
    # below list them, each with its meaning.
    parser.usage = "%(prog)s [-h] [--config FILE] [--SETTING VALUE ...]"
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="TOML file of settings: flat keys, the same names as the flags with "
        "underscores; an unknown key or a [table] is an error.",
    )
    flags: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def defer(_parser: Any, *names: Any, **kwargs: Any) -> None:  # added below, by topic
        flags[kwargs["dest"]] = (names, kwargs)

    source = CliSettingsSource(
        cls,
        root_parser=parser,
        cli_prog_name=parser.prog,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_avoid_json=True,
        cli_hide_none_type=True,
        cli_show_env_vars=True,
        add_argument_method=defer,
    )
    for topic, names in settings_by_topic(cls):
        group = parser.add_argument_group(topic.title, topic.description)
        for name in names:
            args, kwargs = flags.pop(name)
            group.add_argument(*args, **kwargs)
    for args, kwargs in flags.values():  # none: every field has a topic
        parser.add_argument(*args, **kwargs)
    return source


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise UsageError(f"config file {path} not found; check the --config path") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    # Flat keys only, each a setting of some service: one file serves every service (each
    # takes the settings it reads), so a table ([learner], [actor]...) has no meaning here.
    # A key nothing reads is refused, as a misspelt flag is, never dropped without a word.
    known = setting_names()
    for key, value in data.items():
        if isinstance(value, dict):
            raise UsageError(
                f"config file {path}: table [{key}] is not supported; write its settings as "
                "flat keys at the top of the file (one file serves every service, each "
                "reads the settings it has)"
            )
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else "; see docs/reference/settings.md"
            raise UsageError(f"config file {path}: unknown setting {key!r}{hint}")
    return data


def setting_names() -> set[str]:
    """Every setting any service reads (the fields of every settings group)."""
    names: set[str] = set()
    classes: list[type[BaseSettings]] = [SettingsGroup]
    while classes:
        c = classes.pop()
        names.update(c.model_fields)
        classes.extend(c.__subclasses__())
    return names


def format_validation_error(exc: ValidationError) -> str:
    """The first problem, on one line, naming the setting as the user would type it."""
    err = exc.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    loc = ".".join(str(p) for p in err.get("loc", ()))
    if not loc:
        return f"settings: {msg}"
    value = err.get("input")
    if isinstance(value, dict):
        got = ""
    elif is_secret_field(loc, SettingsGroup):
        got = f" (got {REDACTED!r})"
    else:
        got = f" (got {shown(value)!r})"
    flag = "--" + loc.replace("_", "-")
    return f"setting {loc} ({flag} / {ENV_PREFIX}{loc.upper()}): {msg}{got}"


def load_settings(
    cls: type[S], flags: dict[str, Any] | None = None, config_file: str | None = None
) -> S:
    """Build `cls` from its layers, defaults < preset < config file < env < flags; a bad
    value or an unknown preset is a one-line `UsageError`.

    The preset's name is itself a setting (flag, then variable, then config file, then
    `cls`'s default); `auto` takes the one picked from the env's spaces (pick_preset) and
    keeps its name; only the preset's values that are fields of `cls` apply (an actor
    takes no learning rate).
    """
    flags = dict(flags or {})
    config_file = flags.pop("config", None) or config_file or os.environ.get(ENV_PREFIX + "CONFIG")
    file_values: dict[str, Any] = {}
    if config_file:
        file_values = {k: v for k, v in read_config(config_file).items() if k in cls.model_fields}
    preset_values: dict[str, Any] = {}
    if "preset" in cls.model_fields:
        name = _layered("preset", cls, flags, file_values)
        if name == AUTO:
            # From the env the other layers name: the pick never changes the env.
            name = auto_preset(str(_layered("env_id", cls, flags, file_values)))[0]
            preset_values = {k: v for k, v in _preset_values(name).items() if k != "env_id"}
        else:
            preset_values = _preset_values(str(name or ""))
        preset_values = {k: v for k, v in preset_values.items() if k in cls.model_fields}

    class _Layered(cls):  # type: ignore[valid-type,misc]
        @classmethod
        def settings_customise_sources(cls_, settings_cls, init_settings, env_settings, **_):
            return (init_settings, env_settings, lambda: file_values, lambda: preset_values)

    _Layered.__name__ = cls.__name__
    try:
        loaded = _Layered(**flags)
    except ValidationError as exc:
        raise UsageError(format_validation_error(exc)) from None
    return cls.model_validate(loaded.model_dump())


def _layered(
    name: str, cls: type[BaseSettings], flags: dict[str, Any], file: dict[str, Any]
) -> Any:
    """Setting `name` from the layers above the preset (flag, variable, config file), else
    `cls`'s default."""
    if name in flags:
        return flags[name]
    if ENV_PREFIX + name.upper() in os.environ:
        return os.environ[ENV_PREFIX + name.upper()]
    if name in file:
        return file[name]
    return cls.model_fields[name].default


def _preset_values(name: str) -> dict[str, Any]:
    return {} if name in ("", NO_PRESET) else read_preset(name)


def settings_env(settings: BaseSettings) -> dict[str, str]:
    """The `PPOMQ_*` variables that reproduce `settings` in a child process."""
    out = {}
    for name, value in settings.model_dump().items():
        value = plain(value)  # a child gets the secret itself
        if value is None:
            continue  # every optional field defaults to None: unset means the same
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list | tuple):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        out[ENV_PREFIX + name.upper()] = text
    return out
