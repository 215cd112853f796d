"""`ppomq` command line: one subcommand per module in ppomq.commands.

Command modules keep heavy imports (torch, gymnasium) inside their run functions so that
`ppomq --help` and the CLI's Redis verbs start fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ppomq import __version__
from ppomq.core.errors import UsageError, UserError
from ppomq.core.log import install_plain_warnings

# Subcommand modules, in the order `ppomq --help` lists them. Each has register(subparsers).
COMMAND_MODULES = (
    "train",
    "learner",
    "actor",
    "weightserver",
    "weights",
    "eval",
    "status",
    "bench",
    "presets",
    "keys",
)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, add_arguments: Callable[[Any], None] | None = None, **kw: Any):
        # Flags are matched whole: a prefix (`--total-step`) or a typo of one is an error,
        # not a silent match of whichever flag it begins.
        kw.setdefault("allow_abbrev", False)
        super().__init__(*args, **kw)
        self._add_arguments = add_arguments

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # A command's flags are built when that command is parsed (its --help included),
        # not for every command on every start: building train's takes pydantic-settings
        # longer than the rest of the parser.
        if self._add_arguments:
            add, self._add_arguments = self._add_arguments, None
            add(self)
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        # argparse leaves unknown flags to the top parser, which would point at `ppomq
        # --help`: point at the help of the command they were given to.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            self._usage_error(f"unrecognized arguments: {' '.join(extras)}", prog)
        return parsed

    def error(self, message: str) -> None:  # one line, exit 2, as for every usage error
        self._usage_error(message, self.prog)

    @staticmethod
    def _usage_error(message: str, prog: str) -> None:
        # main() prints "ppomq: error: " before it: no program name here, or it is doubled.
        raise UsageError(f"{message} (see {prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ppomq", description="Distributed IMPALA-style PPO over ZeroMQ.")
    parser.add_argument("--version", action="version", version=f"ppomq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"ppomq.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and any("://" in a and "@" in a for a in sys.argv):
        from ppomq.core.store.connect import hide_secrets_in_title

        hide_secrets_in_title()  # `ps` shows --redis-url and the like without the password
    install_plain_warnings()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        code = int(args.func(args) or 0)
        # A reader that went away shows up here, where it can be caught, rather than in
        # the interpreter's final flush.
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except UserError as exc:
        # A service's stderr may be a log on the disk that just filled up: the exit code
        # still says what happened (the launcher reads it), the line is lost.
        with contextlib.suppress(OSError):
            print(f"ppomq: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _stdout_closed() -> int:
    """Whoever read our stdout stopped (`ppomq weights list | head -1`): end quietly, as a C
    tool killed by SIGPIPE does (status 128 + 13). Pointing stdout at /dev/null keeps the
    interpreter's flush at exit from raising the same error again (Python's own recipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13


if __name__ == "__main__":
    sys.exit(main())
