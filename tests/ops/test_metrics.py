"""Prometheus /metrics: served over real HTTP, counters follow the services' totals."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ppomq.core.metrics import ActorMetrics, LearnerMetrics, start_metrics_server
from tests.support import free_port


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_learner_counters_advance_to_the_totals_the_learner_keeps():
    registry = CollectorRegistry()
    port = free_port()
    start_metrics_server(port, addr="127.0.0.1", registry=registry)
    m = LearnerMetrics(registry)
    m.record_update(
        version=1, env_steps=256, accepted=1, rejects={"stale": 3}, phase_s={"sgd": 0.5}
    )
    m.record_update(
        version=2, env_steps=512, accepted=2, rejects={"stale": 5, "bad_shape": 1}, sps=1000.0
    )
    got = _scrape(port)
    assert got[("ppomq_learner_version", ())] == 2
    assert got[("ppomq_learner_env_steps_total", ())] == 512
    assert got[("ppomq_learner_batches_accepted_total", ())] == 2
    assert got[("ppomq_learner_batches_rejected_total", (("reason", "stale"),))] == 5
    assert got[("ppomq_learner_batches_rejected_total", (("reason", "bad_shape"),))] == 1
    assert got[("ppomq_learner_phase_seconds_total", (("phase", "sgd"),))] == 0.5
    assert got[("ppomq_learner_sps", ())] == 1000.0


def test_actor_metrics_count_batches_and_steps():
    registry = CollectorRegistry()
    m = ActorMetrics(registry)
    m.record_batch(env_steps=256, policy_version=3)
    m.record_batch(env_steps=256, policy_version=4)
    assert registry.get_sample_value("ppomq_actor_env_steps_total") == 512
    assert registry.get_sample_value("ppomq_actor_batches_sent_total") == 2
    assert registry.get_sample_value("ppomq_actor_policy_version") == 4
    assert registry.get_sample_value("ppomq_actor_sps") > 0


def test_actor_time_by_phase_is_counted_and_said_as_shares():
    registry = CollectorRegistry()
    m = ActorMetrics(registry)
    m.add_time("sample", 9.0)
    m.add_time("weights", 0.5)
    m.add_time("send", 0.5)
    m.add_time("sample", 0.0)
    assert registry.get_sample_value("ppomq_actor_seconds_total", {"phase": "sample"}) == 9.0
    assert m.time_split() == "sample 90.0%, weights 5.0%, send 5.0% of 10.0 s"
    assert ActorMetrics(CollectorRegistry()).time_split() == (
        "sample 0.0%, weights 0.0%, send 0.0% of 0.0 s"
    )


def test_port_zero_serves_nothing_and_a_taken_port_is_an_error():
    start_metrics_server(0)  # off: returns without binding anything
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            start_metrics_server(port, addr="127.0.0.1", registry=CollectorRegistry())


def test_actor_weights_wait_share_is_served_per_batch_after_the_start_up_one():
    """The share of the loop spent on weights between two batches, as /metrics serves it:
    the first batch's window (the wait for the learner's first weights) is start-up."""
    registry = CollectorRegistry()
    port = free_port()
    start_metrics_server(port, addr="127.0.0.1", registry=registry)
    m = ActorMetrics(registry)
    m.add_time("weights", 30.0)  # start-up
    m.add_time("sample", 1.0)
    assert m.weights_share_since_mark() is None
    m.add_time("send", 0.5)
    m.add_time("weights", 8.0)
    m.add_time("sample", 1.5)
    assert m.weights_share_since_mark() == pytest.approx(0.8)
    assert _scrape(port)[("ppomq_actor_weights_wait_fraction", ())] == pytest.approx(0.8)
    m.add_time("sample", 2.0)
    assert m.weights_share_since_mark() == 0.0
    assert m.weights_share_since_mark() is None  # no time passed: nothing to say
    assert registry.get_sample_value("ppomq_actor_weights_wait_fraction") == 0.0
