"""A CURVE socket facing a peer without CURVE says so, on real sockets in this process:
the failure is logged with its cause, counted by side and reason (ppomq.core.transport.curvezmq),
and the
count reaches /metrics' collector (ppomq.core.metrics.HandshakeFailures)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import zmq.auth
from prometheus_client import CollectorRegistry

from ppomq.commands.keys import generate
from ppomq.core.metrics import HandshakeFailures
from ppomq.core.transport.curvezmq import (
    CurveClient,
    CurveServer,
    handshake_failures,
    last_client_failure,
)
from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[CurveServer, CurveClient]:
    root = tmp_path_factory.mktemp("keys") / "k"
    generate(root, 1)
    spub, ssec = zmq.auth.load_certificate(root / "server.key_secret")
    cpub, csec = zmq.auth.load_certificate(root / "actors" / "actor-0.key_secret")
    assert ssec is not None and csec is not None
    return (
        CurveServer(public=spub, secret=ssec, allowed_dir=str(Path(root) / "allowed")),
        CurveClient(public=cpub, secret=csec, server_public=spub),
    )


def _count(side: str, *reasons: str) -> int:
    got = handshake_failures()
    return sum(got.get((side, r), 0) for r in reasons)


def test_a_curve_client_at_a_plain_server_names_it(keys, caplog):
    _, client = keys
    before = _count("client", "server_not_curve")
    with (
        caplog.at_level(logging.WARNING, logger="ppomq.core.transport.curvezmq"),
        RolloutReceiver("tcp://127.0.0.1:0") as rx,
        RolloutSender(rx.endpoint, curve=client) as tx,
    ):
        assert not tx.send([b"x"], timeout_ms=200)  # never delivered
        wait_until(lambda: _count("client", "server_not_curve") > before, 20,
                   "the client's server_not_curve failure counted")  # fmt: skip
    cause = last_client_failure()
    assert cause is not None and "does not use CURVE" in cause and rx.endpoint in cause
    assert any("does not use CURVE" in r.getMessage() for r in caplog.records)


def test_a_plain_client_at_a_curve_server_is_refused_counted_and_exported(keys, caplog):
    server, _ = keys
    # The server sees the mechanism mismatch, or (when the client hangs up first) a
    # handshake dropped midway: either way one refused client.
    reasons = ("client_not_curve", "dropped")
    before = _count("server", *reasons)
    with (
        caplog.at_level(logging.INFO, logger="ppomq.core.transport.curvezmq"),
        RolloutReceiver("tcp://127.0.0.1:0", curve=server) as rx,
        RolloutSender(rx.endpoint) as tx,
    ):
        assert not tx.send([b"x"], timeout_ms=200)
        assert rx.recv(timeout_ms=0) is None
        after = wait_until(lambda: (n := _count("server", *reasons)) > before and n, 20,
                           f"the server's {reasons} failure counted")  # fmt: skip
    assert any(rx.endpoint in r.getMessage() for r in caplog.records), caplog.text
    registry = CollectorRegistry()
    registry.register(HandshakeFailures())
    exported = sum(
        registry.get_sample_value(
            "ppomq_curve_handshake_failures_total", {"side": "server", "reason": r}
        )
        or 0
        for r in reasons
    )
    assert exported == after
