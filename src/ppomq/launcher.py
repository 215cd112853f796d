"""`ppomq train`: Redis, a weightserver, a learner and K actors as real local processes.

The launcher only starts, watches and stops processes; every piece is the same service a
container would run, configured through the same `PPOMQ_*` variables. The Python children
are forked from one preloading server (ppomq.zygote), so torch & co. are imported once and
shared; Redis is a plain subprocess. Children log to run_dir/logs/; the terminal shows one
progress line read from the learner's Redis status.
"""

# The code lives in ppomq.launch, one job a module; this module re-exports its names.

# ruff: noqa: F401 (re-exports)
from __future__ import annotations

from .launch.child import Child
from .launch.messages import _error, _exit_text, _first_line, _last_error_line, _note
from .launch.progress import Progress, _summary_text
from .launch.shutdown import HURRY_GRACE_S, STOP_GRACE_S, _StopSignals, _Terminated
from .launch.supervisor import (
    CRASH_BACKOFF,
    CRASH_LIMIT,
    CRASH_WINDOW_S,
    DEADLINE_GRACE_S,
    HEALTHY_S,
    REDIS_DOWN_S,
    SUPERVISE_TICK_S,
    Launcher,
)
from .launch.train import run_train
from .launch.wiring import _child_env, _port_of, _subset, connect_addr, default_run_dir
