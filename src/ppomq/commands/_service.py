"""Shared wiring for commands that run a service from a settings model."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ppomq.log import setup_logging
from ppomq.settings import add_settings_arguments, load_settings

_NOT_SETTINGS = {"func", "command"}


def settings_from_args(cls: type, args: argparse.Namespace) -> Any:
    flags = {k: v for k, v in vars(args).items() if k not in _NOT_SETTINGS}
    return load_settings(cls, flags)


def add_service_command(
    sub: Any,
    name: str,
    *,
    settings_cls: Callable[[], type],
    run: Callable[[Any], int],
    help: str,
    description: str,
) -> argparse.ArgumentParser:
    """`ppomq NAME` with one flag per setting; `run(settings)` gives the exit code.

    `settings_cls` and `run` are thunks so that heavy modules load only when used.
    """
    parser = sub.add_parser(name, help=help, description=description)
    cls = settings_cls()
    add_settings_arguments(parser, cls)

    def func(args: argparse.Namespace) -> int:
        settings = settings_from_args(cls, args)
        setup_logging(settings.log_level, settings.log_json, service=name)
        return run(settings)

    parser.set_defaults(func=func)
    return parser
