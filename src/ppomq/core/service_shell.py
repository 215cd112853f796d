"""The one shell of every service: how the learner, an actor and the weightserver start,
count, handle signals and stop.

Settings and logging come first, in ppomq.commands._service (one settings model per
service, one log format). Inside the shell, every service has:
- its Prometheus `/metrics` on `--metrics-port` (a taken port is a one-line usage error),
  and `/healthz` there from the service's main-loop `heartbeat` if it keeps one;
- the same signals: the first SIGTERM/SIGINT is a warm stop (finish the unit of work), the
  second a fast stop that still runs the service's cleanup (ppomq.core.signals);
- the same exit code: after the shell the service returns `stop.exit_code(finished=...)`,
  0 only when its run finished, 128 + the signal when a signal stopped it first;
- one log line when it starts and one when it stops, with how long it ran and how.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ppomq.core.errors import UsageError
from ppomq.core.metrics import Heartbeat, start_metrics_server
from ppomq.core.signals import FastStop, WarmStop

log = logging.getLogger("ppomq")


@contextmanager
def service_shell(
    name: str,
    *,
    metrics_port: int,
    unit_of_work: str,
    on_stop: Callable[[], None] | None = None,
    heartbeat: Heartbeat | None = None,
) -> Iterator[WarmStop]:
    """Run a service's body; yields the WarmStop its loop polls. A FastStop that the body
    did not handle ends the body here, after its own `finally` blocks ran; the service then
    returns `stop.exit_code(finished=False)`, as every stop before the run's end does:

        finished = False
        with service_shell("actor", ...) as stop:
            finished = body(stop)  # True when the run ended, not a stop signal
        return stop.exit_code(finished=finished)
    """
    try:
        start_metrics_server(metrics_port, heartbeat=heartbeat)
    except OSError as exc:
        raise UsageError(str(exc.strerror or exc)) from None
    stop = WarmStop(unit_of_work, on_request=on_stop).install()
    started = time.monotonic()
    log.info("%s started (pid %d)", name, os.getpid())
    try:
        yield stop
    except FastStop:
        pass  # the body's cleanup has run; its exit code is 128 + the signal (see above)
    finally:
        how = "fast stop" if stop.fast else "warm stop" if stop.requested else "done"
        log.info("%s stopped (%s) after %.1f s", name, how, time.monotonic() - started)
        # The exit code is decided and every cleanup has run: from here a stop signal has
        # nothing left to stop. Ignored, not left to the handler, because the interpreter's
        # finalization puts a Python-handled signal back to its default action, and a
        # SIGTERM in the last moments of exiting (a pod deleted as its run finishes) would
        # turn a finished run's exit 0 into death by the signal, which a Job counts as a
        # failure and replaces (a learner that then starts a new run).
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
