"""The weightserver's /metrics: its counters, read from the server at scrape time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ppomq.weightserver.server import WeightServer


def register_metrics(server: WeightServer) -> None:
    """Export `server`'s held version, Redis state and replies on /metrics."""
    from prometheus_client import REGISTRY
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class _Collector:
        def collect(self) -> Any:
            stats = server.stats()
            yield GaugeMetricFamily(
                "ppomq_weightserver_version", "Weights version held", value=stats["version"] or -1
            )
            yield GaugeMetricFamily(
                "ppomq_weightserver_redis_up", "1 if Redis answered last time", stats["redis_up"]
            )
            replies = CounterMetricFamily(
                "ppomq_weightserver_replies", "Replies sent, by status", labels=["status"]
            )
            for status, n in server.counters.items():
                if status != "requests":
                    replies.add_metric([status], n)
            yield replies

    REGISTRY.register(_Collector())
