"""Child-process helpers for the local launcher and the embedded Redis."""

from __future__ import annotations

import signal


def die_with_parent() -> None:
    """preexec_fn: the kernel sends SIGTERM to this child when its parent dies, even by
    SIGKILL, so a killed `ppomq train` never leaves actors or servers running. Linux only;
    elsewhere the launcher's own stop path is the only guard."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
