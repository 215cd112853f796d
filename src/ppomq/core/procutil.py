"""Child-process helpers for the local launcher, its fork server and the embedded Redis."""

from __future__ import annotations

import signal

import setproctitle

PR_SET_PDEATHSIG = 1


def _prctl(option: int, arg: int | bytes) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """preexec_fn: the kernel sends `sig` to this child when its parent dies, even by
    SIGKILL, so a killed `ppomq train` never leaves actors or servers running. Linux only;
    elsewhere the launcher's own stop path is the only guard."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def set_process_title(name: str, command_line: str | None = None) -> None:
    """Name this process (`ps -o comm`, top, psutil's name(); 15 bytes) and, if given, show
    `command_line` as its command line (/proc/PID/cmdline: ps, psutil, the benchmarks):
    forked children would otherwise all show their fork server's."""
    if command_line is not None:
        setproctitle.setproctitle(command_line)  # sets the name too, hence first
    setproctitle.setthreadtitle(name)  # the main thread's name is the process's
