"""`python -m ppomq.healthcheck [SERVICE]`: is this host's ppomq service answering?

One probe for the image's HEALTHCHECK, compose healthchecks and Kubernetes exec probes.
It reads the same `PPOMQ_*` settings as the service, so probe and service agree on ports:

- learner: its rollout port (`PPOMQ_ROLLOUT_BIND`) accepts a TCP connection;
- weightserver: it answers a ping on `PPOMQ_BIND` for the same `PPOMQ_RUN_ID`;
- actor: its Prometheus `/metrics` answers (`PPOMQ_METRICS_PORT`); with the port off an
  actor has nothing to ask, and the probe says so and passes.

Without SERVICE it is read from PID 1's command line (`ppomq learner ...`), which is
what a container's HEALTHCHECK needs. Exit 0 healthy, 1 not, 2 usage; one line on stdout.
"""

from __future__ import annotations

import socket
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

SERVICES = ("learner", "weightserver", "actor")
TIMEOUT_S = 3.0


class Unhealthy(Exception):
    """The service did not answer as a healthy one would; the message says how."""


def detect_service(cmdline: Sequence[str]) -> str | None:
    """The service named after `ppomq` in a command line (tini/docker-init may come first)."""
    seen_ppomq = False
    for arg in cmdline:
        if seen_ppomq and arg in SERVICES:
            return arg
        if Path(arg).name == "ppomq" or arg.endswith("ppomq.cli"):
            seen_ppomq = True
    return None


def local_address(endpoint: str) -> tuple[str, int]:
    """Where to reach a bound ZeroMQ tcp endpoint from the same host."""
    if not endpoint.startswith("tcp://"):
        raise Unhealthy(f"cannot probe non-tcp endpoint {endpoint}")
    host, _, port = endpoint[len("tcp://") :].rpartition(":")
    if host in ("*", "", "0.0.0.0"):
        host = "127.0.0.1"
    elif host in ("[::]", "::"):
        host = "::1"
    return host.strip("[]"), int(port)


def check_learner() -> str:
    from ppomq.settings import LearnerSettings, load_settings

    settings = load_settings(LearnerSettings)
    host, port = local_address(settings.rollout_bind)
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            pass
    except OSError as exc:
        raise Unhealthy(f"learner rollout port {host}:{port} refused: {exc}") from None
    return f"learner accepts rollouts on {host}:{port}"


def check_weightserver() -> str:
    from ppomq.settings import WeightserverSettings, load_settings
    from ppomq.weightserver.client import WeightsClient, WeightsTimeoutError

    settings = load_settings(WeightserverSettings)
    host, port = local_address(settings.bind)
    endpoint = f"tcp://{host}:{port}"
    client = WeightsClient(endpoint, timeout_ms=int(TIMEOUT_S * 1000))
    try:
        reply = client.ping()
    except WeightsTimeoutError:
        raise Unhealthy(f"weightserver at {endpoint} did not answer a ping") from None
    finally:
        client.close()
    run_id = reply.get("run_id")
    if run_id is not None and run_id != settings.run_id:
        raise Unhealthy(
            f"weightserver at {endpoint} serves run {run_id!r}, not {settings.run_id!r}"
        )
    return f"weightserver at {endpoint} holds version {reply.get('version')}"


def check_metrics(port: int) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            if resp.status != 200:
                raise Unhealthy(f"{url} answered HTTP {resp.status}")
    except OSError as exc:
        raise Unhealthy(f"{url} did not answer: {exc}") from None
    return f"{url} answers"


def check_actor() -> str:
    from ppomq.settings import ActorSettings, load_settings

    settings = load_settings(ActorSettings)
    if not settings.metrics_port:
        return "actor: PPOMQ_METRICS_PORT is 0, nothing to probe"
    return check_metrics(settings.metrics_port)


CHECKS = {"learner": check_learner, "weightserver": check_weightserver, "actor": check_actor}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    service = args[0] if args else None
    if service is None:
        try:
            raw = Path("/proc/1/cmdline").read_bytes()
        except OSError:
            raw = b""
        service = detect_service([a.decode() for a in raw.split(b"\0") if a])
    if service not in CHECKS:
        print(
            f"usage: python -m ppomq.healthcheck [{'|'.join(SERVICES)}] "
            f"(got {service!r}; PID 1 runs no ppomq service)",
            file=sys.stderr,
        )
        return 2
    try:
        print(CHECKS[service]())
    except Unhealthy as exc:
        print(f"unhealthy: {exc}")
        return 1
    except Exception as exc:  # a bad setting, say: unhealthy, with the reason, not a traceback
        print(f"unhealthy: {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
