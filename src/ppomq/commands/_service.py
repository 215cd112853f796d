"""Shared wiring for commands that run a service from a settings model."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from ppomq.core.log import setup_logging
from ppomq.core.settings import add_settings_arguments, load_settings


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
    flags: list[Any] = []  # the command's CLI settings source, built when the command is parsed
    parser = sub.add_parser(
        name,
        help=help,
        description=description,
        add_arguments=lambda p: flags.append(add_settings_arguments(p, settings_cls())),
    )

    def func(args: argparse.Namespace) -> int:
        cls = settings_cls()
        settings = load_settings(cls, flags[0](parsed_args=args)(), getattr(args, "config", None))
        setup_logging(settings.log_level, settings.log_json, service=name)
        code = run(settings)
        # The service has stopped and said so. The interpreter's own teardown, with
        # libzmq's and torch's native threads still about, can abort ("terminate called
        # without an active exception": exit 134 instead of the code decided above), so
        # the process ends as multiprocessing ends its children: the exit handlers, the
        # streams flushed, then os._exit.
        atexit._run_exitfuncs()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    parser.set_defaults(func=func)
    return parser
