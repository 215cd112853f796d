"""Prometheus metrics: one `/metrics` port per service process (`PPOMQ_METRICS_PORT`).

    from ppomq.metrics import ActorMetrics, LearnerMetrics, start_metrics_server

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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server

_started: dict[int, Any] = {}
_lock = threading.Lock()


def start_metrics_server(
    port: int, *, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY
) -> None:
    """Serve `registry` on http://ADDR:PORT/metrics from a daemon thread; 0 turns it off.

    Calling it again for a port already served in this process does nothing. A port that
    is taken raises OSError naming the port, which a service should treat as fatal.
    """
    if not port:
        return
    with _lock:
        if port in _started:
            return
        try:
            _started[port] = start_http_server(port, addr=addr, registry=registry)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot serve /metrics on {addr}:{port} ({exc.strerror}); "
                "pass another --metrics-port or 0 to turn it off",
            ) from None


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
        self.sps = Gauge("ppomq_learner_sps", "Env steps received per second, whole run", **kw)
        self.mean_return = Gauge(
            "ppomq_learner_mean_return_20", "Mean return of the last 20 episodes", **kw
        )
        self._env_steps = _Totals(
            Counter("ppomq_learner_env_steps", "Env steps in valid batches received", **kw)
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
        rejects: Mapping[str, int] | None = None,
        phase_s: Mapping[str, float] | None = None,
        sps: float | None = None,
        mean_return: float | None = None,
    ) -> None:
        """Cumulative totals as the learner keeps them (see the module docstring)."""
        self.version.set(version)
        self._env_steps.set_total(env_steps)
        self._accepted.set_total(accepted)
        for reason, n in (rejects or {}).items():
            self._rejected.set_total(n, str(reason))
        for phase, seconds in (phase_s or {}).items():
            self._phase.set_total(seconds, phase)
        if sps is not None:
            self.sps.set(sps)
        if mean_return is not None:
            self.mean_return.set(mean_return)


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


__all__ = ["ActorMetrics", "LearnerMetrics", "start_metrics_server"]
