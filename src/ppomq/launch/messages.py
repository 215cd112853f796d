"""The launcher's own lines: one-line notes while it runs, errors to end the run with."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ppomq.core.errors import UserError


def exit_text(code: int) -> str:
    """'exited with 1', 'was killed by SIGKILL' (multiprocessing: minus the signal)."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def last_error_line(log_path: Path) -> str | None:
    """The `ppomq: error: ...` line a service printed last, without the prefix."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 8192))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return None
    # Whole lines only: a log on a disk that filled can end in a line cut off mid-word.
    whole = tail[: tail.rfind("\n") + 1]
    lines = [ln for ln in whole.splitlines() if ln.startswith("ppomq: error: ")]
    return lines[-1].removeprefix("ppomq: error: ") if lines else None


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def error_line(text: str, code: int) -> UserError:
    err = UserError(text)
    err.exit_code = code
    return err


def note(text: str) -> None:
    print(f"\r\033[K{text}" if sys.stdout.isatty() else text, flush=True)
