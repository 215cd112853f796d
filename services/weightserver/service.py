"""`ppomq weightserver`: settings -> logging -> socket -> serve until stopped or the run ends.

Exit 0 once its run is marked finished (by itself once every active client was told, or at
a stop signal after the mark); stopped by a signal before that, 128 + the signal (143 for
SIGTERM).
"""

from __future__ import annotations

import logging

import zmq

from ppomq.core.errors import UserError
from ppomq.core.log import setup_logging
from ppomq.core.service_shell import service_shell
from ppomq.core.settings import WeightserverSettings, redact_url
from ppomq.core.transport.curvezmq import server_from_settings
from ppomq.weightserver.metrics import register_metrics
from ppomq.weightserver.server import WeightServer

log = logging.getLogger("ppomq.weightserver")


def main(settings: WeightserverSettings) -> int:
    setup_logging(settings.log_level, settings.log_json, "weightserver")
    # A bad key file, or a bind beyond loopback without CURVE: one line, exit 2, at start.
    curve = server_from_settings(settings, bind=settings.bind, bind_flag="--bind")
    try:
        server = WeightServer(
            redis_url=settings.redis_url,
            run_id=settings.run_id,
            bind=settings.bind,
            poll_interval_s=settings.poll_interval_s,
            curve=curve,
        )
    except zmq.ZMQError as exc:
        raise UserError(f"cannot bind --bind {settings.bind}: {exc}") from None

    if settings.metrics_port:
        register_metrics(server)
    # The serve loop polls its own stop event: the first signal sets it (server.stop).
    with service_shell(
        "weightserver", metrics_port=settings.metrics_port, unit_of_work="the current reply",
        on_stop=server.stop,
    ) as stop:  # fmt: skip
        log.info(
            "weightserver for run %r listening on %s (Redis %s)%s",
            settings.run_id,
            server.endpoint,
            redact_url(settings.redis_url),
            f", CURVE, allow-list {curve.allowed_dir}" if curve else "",
        )
        try:
            server.serve_forever()
        finally:
            server.close()
    return stop.exit_code(finished=server.finished)
