"""`python -m ppomq.healthcheck [SERVICE]`: is this host's ppomq service answering?

One probe for the image's HEALTHCHECK, compose healthchecks and Kubernetes exec probes.
It reads the same `PPOMQ_*` settings as the service, so probe and service agree on ports:

- learner: its rollout port (`PPOMQ_ROLLOUT_BIND`) accepts a TCP connection; with
  `--stalled-after SECONDS` (the Kubernetes liveness probe) also that it is making progress:
  the status it writes to Redis after every update (`updated_at`, what `ppomq status`
  reads) is no older than SECONDS, counted from the learner's own start at the earliest
  (`--pid`, default 1: a container's PID 1), so a learner just (re)started has SECONDS to
  train its first update. A learner that no actor feeds makes no progress either: a restart
  is a warm stop and a resume, so SECONDS should be well above a normal gap. Redis out of
  reach passes (restarting the learner would not bring it back; its own clients retry);
- weightserver: it answers a ping on `PPOMQ_BIND` for the same `PPOMQ_RUN_ID` (under
  CURVE the probe connects with the server's own key pair, which the server allows);
- actor: its main loop is turning: `/healthz` on its metrics port (`PPOMQ_METRICS_PORT`)
  answers 200, not 503 (no turn for `--stalled-after` SECONDS, default 120:
  ppomq.core.metrics.STALLED_AFTER_S). Not `/metrics`: a thread of its own serves that, and
  answers as well while the loop hangs in an env step. With the port off an actor has
  nothing to ask, and the probe says so and passes.

Without SERVICE it is read from PID 1's command line (`ppomq learner ...`), which is
what a container's HEALTHCHECK needs. Exit 0 healthy, 1 not, 2 usage; one line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ppomq.core.settings import LearnerSettings

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


def process_start_time(pid: int) -> float | None:
    """When process `pid` started (epoch seconds, to about a second), or None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22: starttime, in ticks
        btime = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def check_progress(settings: LearnerSettings, stalled_after_s: float, pid: int) -> str:
    """Unhealthy when the learner's status in Redis is older than `stalled_after_s`,
    counting from the learner's start at the earliest."""
    from ppomq.core.store.connect import REDIS_FAILURES, make_redis
    from ppomq.core.store.keys import RunKeys

    run_id = settings.run_id
    client = make_redis(settings.redis_url, timeout_s=TIMEOUT_S)
    try:
        raw = client.get(RunKeys(run_id).stats)
    except REDIS_FAILURES as exc:
        return f"progress not checked (Redis: {type(exc).__name__})"
    finally:
        client.close()
    updated_at = None
    if raw is not None:
        try:
            updated_at = float(json.loads(raw)["updated_at"])
        except (ValueError, KeyError, TypeError):
            updated_at = None
    started = process_start_time(pid)
    since = max(t for t in (updated_at, started, 0.0) if t is not None)
    if since == 0.0:
        return "progress not checked (no status in Redis, learner start unknown)"
    idle = time.time() - since
    what = "its last update" if since == updated_at else "its start, with no update since"
    if idle > stalled_after_s:
        raise Unhealthy(
            f"learner of run {run_id!r} made no progress for {idle:.0f} s since {what} "
            f"(limit {stalled_after_s:.0f} s)"
        )
    return f"progress {idle:.0f} s ago ({what})"


def check_learner(stalled_after_s: float | None = None, pid: int = 1) -> str:
    from ppomq.core.settings import LearnerSettings, load_settings

    settings = load_settings(LearnerSettings)
    host, port = local_address(settings.rollout_bind)
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            pass
    except OSError as exc:
        raise Unhealthy(f"learner rollout port {host}:{port} refused: {exc}") from None
    done = f"learner accepts rollouts on {host}:{port}"
    if stalled_after_s is not None:
        done += "; " + check_progress(settings, stalled_after_s, pid)
    return done


def check_weightserver() -> str:
    from ppomq.core.settings import WeightserverSettings, load_settings
    from ppomq.core.transport.curvezmq import self_client, server_from_settings
    from ppomq.core.transport.weights_client import WeightsClient, WeightsTimeoutError

    settings = load_settings(WeightserverSettings)
    host, port = local_address(settings.bind)
    endpoint = f"tcp://{host}:{port}"
    curve = server_from_settings(settings, bind=settings.bind, bind_flag="--bind")
    client = WeightsClient(
        endpoint,
        timeout_ms=int(TIMEOUT_S * 1000),
        curve=self_client(curve) if curve is not None else None,
    )
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


def check_healthz(port: int, stalled_after_s: float | None = None) -> str:
    """The service's own word on its main loop (ppomq.core.metrics.healthz): 200 healthy."""
    url = f"http://127.0.0.1:{port}/healthz"
    if stalled_after_s is not None:
        url += f"?stalled_after={stalled_after_s:g}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return f"{url}: {resp.read().decode().strip()}"
    except urllib.error.HTTPError as exc:  # 503 stalled, 404 no heartbeat
        raise Unhealthy(f"{url} answered {exc.code}: {exc.read().decode().strip()}") from None
    except OSError as exc:
        raise Unhealthy(f"{url} did not answer: {exc}") from None


def check_actor(stalled_after_s: float | None = None) -> str:
    from ppomq.core.settings import ActorSettings, load_settings

    settings = load_settings(ActorSettings)
    if not settings.metrics_port:
        return "actor: PPOMQ_METRICS_PORT is 0, nothing to probe"
    return check_healthz(settings.metrics_port, stalled_after_s)


CHECKS = {"learner": check_learner, "weightserver": check_weightserver, "actor": check_actor}


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ppomq.healthcheck")
    parser.add_argument("service", nargs="?", help="|".join(SERVICES) + " (default: PID 1's)")
    parser.add_argument(
        "--stalled-after",
        type=float,
        metavar="SECONDS",
        help="learner: also unhealthy when it has not finished an update for this long; "
        "actor: unhealthy when its main loop has not turned for this long (default 120)",
    )
    parser.add_argument("--pid", type=int, default=1, help="the learner's pid (default 1)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        opts = _parse(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse has printed its one-line usage error
        return int(exc.code or 0)
    service = opts.service
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
    stalled_after = opts.stalled_after
    if stalled_after is not None and (service not in ("learner", "actor") or stalled_after <= 0):
        print("usage: --stalled-after takes seconds > 0 and applies to the learner and the "
              "actor only", file=sys.stderr)  # fmt: skip
        return 2
    try:
        if service == "learner":
            print(check_learner(stalled_after, opts.pid))
        elif service == "actor":
            print(check_actor(stalled_after))
        else:
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
