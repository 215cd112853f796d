"""Prometheus metrics: one `/metrics` port per service process (`PPOMQ_METRICS_PORT`).

    from ppomq.core.metrics import ActorMetrics, LearnerMetrics, start_metrics_server

    start_metrics_server(settings.metrics_port)      # no-op when the port is 0
    metrics = LearnerMetrics()                       # once per process
    metrics.record_update(version=v, env_steps=n, accepted=a, rejects={"stale": 3})

    metrics = ActorMetrics()
    metrics.record_batch(env_steps=T * N, policy_version=v)

The services keep cumulative totals (the staleness gate's counts, env steps); the record
methods take those totals and advance the Prometheus counters by the difference, so a
call per update is enough and nothing is counted twice. Names follow Prometheus'
conventions (`ppomq_<service>_<what>[_total|_seconds]`); CleanRL's `charts/SPS` is
`ppomq_actor_sps` / `ppomq_learner_sps` here. The default registry also carries the
process collector (CPU, memory, open fds), which is what a liveness dashboard wants.

The same port answers `/healthz` for a service that keeps a `Heartbeat` (the actor): 200
while its main loop turns, 503 once it has not for STALLED_AFTER_S (or `?stalled_after=S`),
404 for a service that keeps none. `/metrics` cannot say that: it is served by a thread of
its own, which answers just as well while the main loop is stuck in an env step.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.core import CounterMetricFamily

from ppomq.core.transport.curvezmq import handshake_failures

_started: dict[int, Any] = {}
_lock = threading.Lock()

# /healthz's limit unless the probe passes its own: a main loop that has not turned for this
# long is stuck. The actor's turns at least once per rollout (NUM_STEPS steps of NUM_ENVS
# envs: well under a second for CartPole, a few for MuJoCo) and every 50 ms while it waits
# for weights or for the learner, so only a hang gets near it.
STALLED_AFTER_S = 120.0


class Heartbeat:
    """When a service's main loop last turned: the loop calls `beat()` each time round and in
    every slice of its waits; `/healthz` compares `age_s()` with its limit. Counted from the
    Heartbeat's creation (the service's start) until the first beat."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._at = clock()

    def beat(self) -> None:
        self._at = self._clock()

    def age_s(self) -> float:
        return self._clock() - self._at


def healthz(heartbeat: Heartbeat | None, query: str = "") -> tuple[int, str]:
    """(HTTP status, one line) for GET /healthz?QUERY: see the module docstring."""
    if heartbeat is None:
        return 404, "no heartbeat kept: probe this service with python -m ppomq.healthcheck"
    try:
        limit = float(parse_qs(query).get("stalled_after", [STALLED_AFTER_S])[0])
    except ValueError:
        limit = float("nan")
    if not limit > 0:
        return 400, "stalled_after takes seconds > 0"
    age = heartbeat.age_s()
    if age > limit:
        return 503, f"stalled: the main loop has not turned for {age:.0f} s (limit {limit:g} s)"
    return 200, f"ok: the main loop turned {age:.1f} s ago (limit {limit:g} s)"


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}


def _app(registry: CollectorRegistry, heartbeat: Heartbeat | None) -> Callable[..., Any]:
    """Prometheus' own WSGI app for everything but /healthz."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/healthz":
            return metrics(environ, start_response)
        status, line = healthz(heartbeat, environ.get("QUERY_STRING", ""))
        body = (line + "\n").encode()
        start_response(
            f"{status} {_REASONS[status]}",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress must not hold up the service's exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a probe every few seconds is not news


def start_metrics_server(
    port: int,
    *,
    addr: str = "0.0.0.0",
    registry: CollectorRegistry = REGISTRY,
    heartbeat: Heartbeat | None = None,
) -> None:
    """Serve `registry` on http://ADDR:PORT/metrics, and `/healthz` from `heartbeat`, from a
    daemon thread; 0 turns it off.

    Calling it again for a port already served in this process does nothing. A port that
    is taken raises OSError naming the port, which a service should treat as fatal.
    """
    if not port:
        return
    with _lock:
        if port in _started:
            return
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]

            class Server(_Server):
                address_family = family  # an IPv6 addr needs an IPv6 socket

            httpd = make_server(sockaddr[0], port, _app(registry, heartbeat), Server, _QuietHandler)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot serve /metrics on {addr}:{port} ({exc.strerror}); "
                "pass another --metrics-port or 0 to turn it off",
            ) from None
        thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
        thread.start()
        _started[port] = (httpd, thread)


class _Totals:
    """Advance a Counter to a cumulative total the caller keeps (per label set)."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.seen: dict[tuple[str, ...], float] = {}

    def set_total(self, total: float, *labels: str) -> None:
        last = self.seen.get(labels, 0.0)
        if total > last:
            child = self.counter.labels(*labels) if labels else self.counter
            child.inc(total - last)
        # A total that went down (a restarted count) starts a new baseline.
        self.seen[labels] = total


class LearnerMetrics:
    """The learner's gauges and counters; `record_update` after each PPO update."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        kw: dict[str, Any] = {"registry": registry}
        self.version = Gauge("ppomq_learner_version", "Newest published weights version", **kw)
        self.sps = Gauge("ppomq_learner_sps", "Env steps accepted per second, whole run", **kw)
        self.mean_return = Gauge(
            "ppomq_learner_mean_return_20", "Mean return of the last 20 episodes", **kw
        )
        self._env_steps = _Totals(
            Counter("ppomq_learner_env_steps", "Env steps in accepted batches", **kw)
        )
        self._discarded = _Totals(
            Counter(
                "ppomq_learner_discarded_env_steps",
                "Env steps in valid batches refused (stale, future version, seq)",
                **kw,
            )
        )
        self._accepted = _Totals(
            Counter("ppomq_learner_batches_accepted", "Batches admitted to training", **kw)
        )
        self._rejected = _Totals(
            Counter(
                "ppomq_learner_batches_rejected",
                "Batches refused (stale, or invalid at decode), by reason",
                ["reason"],
                **kw,
            )
        )
        # The rollout ledger's totals (every actor ever seen); no per-actor labels: actor
        # ids are unbounded, so is a label set over them.
        self._ledger = {
            key: _Totals(Counter(f"ppomq_learner_ledger_{key}", help_, **kw))
            for key, help_ in (
                ("sent", "Batches actors say they sent (the `sent` of their last header)"),
                ("received", "Messages of identifiable actors that reached the learner"),
                ("duplicates", "Batches refused for a seq not above the last accepted one"),
                (
                    "surplus",
                    "Valid batches dropped unread at the door: the oldest queued, "
                    "for a newer one, when the learner had more than it could use",
                ),
                ("actors_forgotten", "Actors forgotten after --forget-actor-after-s of quiet"),
                ("actors_dropped_over_cap", "Actors dropped beyond --max-actors"),
            )
        }
        self.lost_in_flight = Gauge(
            "ppomq_learner_ledger_lost_in_flight",
            "Batches sent but never received: actor killed mid-send, partition, learner restart",
            **kw,
        )
        self.actors_tracked = Gauge(
            "ppomq_learner_actors_tracked", "Actors the learner keeps per-actor state for", **kw
        )
        self._phase = _Totals(
            Counter(
                "ppomq_learner_phase_seconds",
                "Time spent per learner phase (wait, targets, sgd, publish)",
                ["phase"],
                **kw,
            )
        )

    def record_update(
        self,
        *,
        version: int,
        env_steps: int,
        accepted: int,
        discarded_env_steps: int = 0,
        rejects: Mapping[str, int] | None = None,
        phase_s: Mapping[str, float] | None = None,
        sps: float | None = None,
        mean_return: float | None = None,
    ) -> None:
        """Cumulative totals as the learner keeps them (see the module docstring)."""
        self.version.set(version)
        self._env_steps.set_total(env_steps)
        self._discarded.set_total(discarded_env_steps)
        self._accepted.set_total(accepted)
        for reason, n in (rejects or {}).items():
            self._rejected.set_total(n, str(reason))
        for phase, seconds in (phase_s or {}).items():
            self._phase.set_total(seconds, phase)
        if sps is not None:
            self.sps.set(sps)
        if mean_return is not None:
            self.mean_return.set(mean_return)

    def record_counts(
        self,
        *,
        accepted: int,
        rejects: Mapping[str, int],
        discarded_env_steps: int = 0,
        ledger: Mapping[str, Any] | None = None,
    ) -> None:
        """The counts that move without an update (rejects while stalled): the learner
        calls this at least every second, updates or not."""
        self._accepted.set_total(accepted)
        self._discarded.set_total(discarded_env_steps)
        for reason, n in rejects.items():
            self._rejected.set_total(n, str(reason))
        if ledger:
            for key, totals in self._ledger.items():
                totals.set_total(ledger.get(key, 0))
            self.lost_in_flight.set(ledger.get("lost_in_flight", 0))
            self.actors_tracked.set(ledger.get("actors_tracked", 0))


ACTOR_PHASES = ("sample", "weights", "send")


class ActorMetrics:
    """An actor's counters; `record_batch` after each batch it sends."""

    def __init__(
        self, registry: CollectorRegistry | None = REGISTRY, *, sps_window_s: float = 10.0
    ) -> None:
        kw: dict[str, Any] = {"registry": registry}
        self.env_steps = Counter("ppomq_actor_env_steps", "Env steps this actor sent", **kw)
        self.batches = Counter("ppomq_actor_batches_sent", "Rollout batches sent", **kw)
        self.policy_version = Gauge(
            "ppomq_actor_policy_version", "Weights version the actor acts with", **kw
        )
        self.sps = Gauge(
            "ppomq_actor_sps", f"Env steps per second over the last ~{sps_window_s:g} s", **kw
        )
        self.sps_window_s = sps_window_s
        self._window_start = time.monotonic()
        self._window_steps = 0
        # Where the main loop's time goes: stepping envs and acting (sample), waiting for and
        # loading weights (weights), encoding and handing batches to the socket (send).
        self.seconds = Counter("ppomq_actor_seconds", "Main-loop time by phase", ["phase"], **kw)
        self.phase_s: dict[str, float] = dict.fromkeys(ACTOR_PHASES, 0.0)
        # The weights phase's share of the loop between two batches: near 1, the actor
        # waits on the learner's updates and another actor replica adds nothing.
        self.weights_wait = Gauge(
            "ppomq_actor_weights_wait_fraction",
            "Share of the main loop's time spent waiting for (and loading) weights between "
            "the actor's last two batches; near 1: the learner binds, more actors will not help",
            **kw,
        )
        self._marked_s: dict[str, float] | None = None

    def add_time(self, phase: str, seconds: float) -> None:
        self.seconds.labels(phase).inc(seconds)
        self.phase_s[phase] += seconds

    def time_split(self) -> str:
        """`sample 91.2%, weights 5.0%, send 3.8% of 12.3 s`, for the log (the same
        seconds go in the actor.stop event)."""
        total = sum(self.phase_s.values())
        parts = ", ".join(
            f"{k} {100 * v / total if total else 0.0:.1f}%" for k, v in self.phase_s.items()
        )
        return f"{parts} of {total:.1f} s"

    def weights_share_since_mark(self) -> float | None:
        """The weights phase's share of the loop's time since the last call, which becomes
        the new mark, and the `ppomq_actor_weights_wait_fraction` gauge's value. None the
        first time (what came before is start-up: the wait for the learner's first
        weights), and when no time passed."""
        marked, self._marked_s = self._marked_s, dict(self.phase_s)
        if marked is None:
            return None
        spent = {k: v - marked[k] for k, v in self.phase_s.items()}
        total = sum(spent.values())
        if total <= 0:
            return None
        share = min(max(spent["weights"] / total, 0.0), 1.0)
        self.weights_wait.set(share)
        return share

    def record_batch(self, *, env_steps: int, policy_version: int) -> None:
        """One batch of `env_steps` (T x N) sent, collected with `policy_version`."""
        self.env_steps.inc(env_steps)
        self.batches.inc()
        self.policy_version.set(policy_version)
        self._window_steps += env_steps
        now = time.monotonic()
        elapsed = now - self._window_start
        if elapsed > 0:
            self.sps.set(self._window_steps / elapsed)
        if elapsed >= self.sps_window_s:
            self._window_start, self._window_steps = now, 0


class HandshakeFailures:
    """`ppomq_curve_handshake_failures_total{side, reason}`: the CURVE handshakes that
    failed in this process (ppomq.core.transport.curvezmq counts them from libzmq's monitor
    events), read at
    each scrape. On a learner or weightserver (side="server") `key_not_allowed` counts
    clients refused by the allow-list and `wrong_server_key` clients that sealed their
    hello for another server's key; on an actor (side="client"), its own failures."""

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(
            "ppomq_curve_handshake_failures",
            "Failed CURVE handshakes by side and likely cause",
            labels=["side", "reason"],
        )

    def describe(self) -> list[CounterMetricFamily]:
        return [self._family()]

    def collect(self) -> list[CounterMetricFamily]:
        family = self._family()
        for (side, reason), n in sorted(handshake_failures().items()):
            family.add_metric([side, reason], n)
        return [family]


# In the default registry, beside the process collector: every service that serves
# /metrics exposes it, whichever of its sockets use CURVE.
REGISTRY.register(HandshakeFailures())

__all__ = [
    "ActorMetrics",
    "HandshakeFailures",
    "Heartbeat",
    "LearnerMetrics",
    "healthz",
    "start_metrics_server",
]
