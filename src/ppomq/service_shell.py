"""The one shell of every service: how the learner, an actor and the weightserver start,
count, handle signals and stop.

Settings and logging come first, in ppomq.commands._service (one settings model per
service, one log format). Inside the shell, every service has:
- its Prometheus `/metrics` on `--metrics-port` (a taken port is a one-line usage error);
- the same signals: the first SIGTERM/SIGINT is a warm stop (finish the unit of work), the
  second a fast stop that still runs the service's cleanup (ppomq.signals);
- one log line when it starts and one when it stops, with how long it ran and how.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import UsageError
from .metrics import start_metrics_server
from .signals import FastStop, WarmStop

log = logging.getLogger("ppomq")


@contextmanager
def service_shell(
    name: str,
    *,
    metrics_port: int,
    unit_of_work: str,
    on_stop: Callable[[], None] | None = None,
) -> Iterator[WarmStop]:
    """Run a service's body; yields the WarmStop its loop polls. A FastStop that the body
    did not handle ends the body here, after its own `finally` blocks ran."""
    try:
        start_metrics_server(metrics_port)
    except OSError as exc:
        raise UsageError(str(exc.strerror or exc)) from None
    stop = WarmStop(unit_of_work, on_request=on_stop).install()
    started = time.monotonic()
    log.info("%s started (pid %d)", name, os.getpid())
    try:
        yield stop
    except FastStop:
        pass  # the body's cleanup has run; exit 0 like a warm stop
    finally:
        how = "fast stop" if stop.fast else "warm stop" if stop.requested else "done"
        log.info("%s stopped (%s) after %.1f s", name, how, time.monotonic() - started)
