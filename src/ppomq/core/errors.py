"""User-facing errors: each becomes one line on stderr and a documented exit code."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; the message says how. Never shown with a traceback."""

    exit_code = 1


class UsageError(UserError):
    exit_code = 2


class NotFoundError(UserError):
    """No such run or version (exit 3)."""

    exit_code = 3


class RedisUnavailableError(UserError):
    """Redis could not be reached or refused us (exit 4)."""

    exit_code = 4


class StorageFullError(UserError):
    """The run dir (or Redis's data) cannot be written: a full disk, a read-only mount
    (exit 5). Restarting would fail the same way; freeing space and running the same
    command again resumes the run."""

    exit_code = 5


def install_hint(extra: str) -> str:
    """The command that adds optional dependency group `extra`, as a user error names it.

    Every documented install is an editable one from the clone (`make setup`, or
    `pip install -e '.[local]'`), so the hint is said for the clone; the extra's name is in
    it too, for an install made another way.
    """
    return f"pip install -e '.[{extra}]' in the ppomq clone"
