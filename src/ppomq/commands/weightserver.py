"""`ppomq weightserver`: serve a run's newest weights to actors (services/weightserver)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ppomq.core.errors import UserError
from ppomq.core.settings import WeightserverSettings, add_settings_arguments, load_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    flags: list[Any] = []  # the CLI settings source, built when the command is parsed

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        flags.append(add_settings_arguments(parser, WeightserverSettings))
        parser.add_argument(
            "--ping",
            metavar="ENDPOINT",
            default=None,
            help="Health check: ask the weightserver at ENDPOINT (e.g. tcp://127.0.0.1:5556) "
            "which version it holds; print it as JSON; exit 0 if it answers, 1 if not.",
        )
        parser.add_argument(
            "--ping-timeout-ms",
            type=int,
            default=2000,
            help="How long --ping waits (default 2000).",
        )

    parser = subparsers.add_parser(
        "weightserver",
        help="Serve the newest weights of a run to actors (ZeroMQ ROUTER, Redis-backed).",
        description=(
            "Keeps the newest weights of --run-id in memory (pub/sub + polling of Redis) and "
            "answers actors' 'newer than v?' requests. Stateless: run as many replicas as "
            "you like. Stops cleanly on SIGTERM/SIGINT. With --ping ENDPOINT it instead asks "
            "a running weightserver for its health and exits 0 if it answers."
        ),
        add_arguments=add_arguments,
    )
    parser.set_defaults(func=lambda args: run(args, flags[0](parsed_args=args)()))


def run(args: argparse.Namespace, flags: dict[str, object]) -> int:
    if args.ping:
        return _ping(args.ping, args.ping_timeout_ms)
    settings = load_settings(WeightserverSettings, flags, getattr(args, "config", None))
    from ppomq.weightserver.service import main  # pulls in zmq and redis only when serving

    return main(settings)


def _ping(endpoint: str, timeout_ms: int) -> int:
    from ppomq.core.transport.weights_client import WeightsClient, WeightsTimeoutError

    with WeightsClient(endpoint, timeout_ms=timeout_ms) as client:
        try:
            reply = client.ping()
        except WeightsTimeoutError:
            raise UserError(
                f"weightserver at {endpoint} did not answer within {timeout_ms} ms"
            ) from None
    reply.pop("id", None)
    print(json.dumps(reply, sort_keys=True))
    return 0
