"""The weightserver as a real process, over real sockets, against a real redis-server."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import msgpack
import numpy as np
import pytest
import redis
import zmq

from ppomq.core.store.keys import BLOB_FIELD, HEADER_FIELD, RunKeys
from ppomq.core.store.weight_store import WeightStore
from ppomq.core.transport.weights_client import WeightsClient, WeightsTimeoutError
from ppomq.proto.weights_blob import unpack_tensors
from tests.support.waiting import wait_until

from ..conftest import free_port
from .helpers import WeightserverProcess, make_weights, mlp_tensors


@pytest.fixture
def server(redis_url: str) -> Iterator[WeightserverProcess]:
    proc = WeightserverProcess(redis_url, "r1")
    yield proc
    proc.stop()


def test_concurrent_clients_get_the_newest_version_then_not_modified(
    server: WeightserverProcess, redis_client: redis.Redis
) -> None:
    store = WeightStore(redis_client, "r1")
    store.publish(*make_weights(1))
    server.wait_for_log("now serving version 1")
    results: dict[int, object] = {}
    asked_twice = threading.Barrier(9)

    def actor(i: int) -> None:
        with WeightsClient(server.endpoint, timeout_ms=10_000) as client:
            first = client.get_newer(-1)
            again = client.get_newer(1)
            asked_twice.wait(timeout=30)
            # Long poll: parked until version 2 arrives.
            newer = client.get_newer(1, wait_ms=20_000)
            results[i] = (first, again, newer)

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    asked_twice.wait(timeout=30)
    with WeightsClient(server.endpoint) as probe:
        # All eight long polls are parked on the server before version 2 exists.
        wait_until(lambda: probe.ping()["parked"] == 8, 20, "8 parked requests")
        store.publish(*make_weights(2))
        assert probe.get_newer(2, wait_ms=200) is None  # a long poll that expires
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 8
    for first, again, newer in results.values():  # type: ignore[misc]
        assert first is not None and first[0].version == 1
        assert again is None
        assert newer is not None and newer[0].version == 2
        got = unpack_tensors(*newer)
        for name, arr in mlp_tensors(2).items():
            np.testing.assert_array_equal(got[name], arr)


def test_ping_reports_the_held_version_and_redis_state(
    server: WeightserverProcess, redis_client: redis.Redis
) -> None:
    WeightStore(redis_client, "r1").publish(*make_weights(3))
    server.wait_for_log("now serving version 3")
    with WeightsClient(server.endpoint) as client:
        pong = client.ping()
    assert pong["version"] == 3 and pong["redis"] == "up" and pong["run_id"] == "r1"
    # The same through the CLI health check.
    out = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "weightserver", "--ping", server.endpoint],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert '"version": 3' in out.stdout


def test_malformed_requests_get_an_error_and_do_not_stop_service(
    server: WeightserverProcess, redis_client: redis.Redis
) -> None:
    WeightStore(redis_client, "r1").publish(*make_weights(1))
    server.wait_for_log("now serving version 1")
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(server.endpoint)
    for body in (b"\xc1not msgpack", msgpack.packb({"op": "steal"}), msgpack.packb([1, 2])):
        sock.send_multipart([b"", body])
        assert sock.poll(10_000)
        frames = sock.recv_multipart()
        assert msgpack.unpackb(frames[1])["status"] == "error"
    sock.close()
    with WeightsClient(server.endpoint) as client:
        got = client.get_newer(-1)
    assert got is not None and got[0].version == 1


def test_a_plain_req_socket_is_answered_too(
    server: WeightserverProcess, redis_client: redis.Redis
) -> None:
    WeightStore(redis_client, "r1").publish(*make_weights(1))
    server.wait_for_log("now serving version 1")
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(server.endpoint)
    sock.send(msgpack.packb({"op": "get", "have": 0}))
    assert sock.poll(10_000)
    frames = sock.recv_multipart()
    sock.close()
    assert msgpack.unpackb(frames[0])["status"] == "weights" and len(frames) == 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_runs_end_stops_the_server_with_128_plus_the_signal(
    redis_url: str, sig: int
) -> None:
    # Not 0: a Kubernetes Job would read 0 as "done" and never replace an evicted pod.
    proc = WeightserverProcess(redis_url, "r1")
    assert proc.stop(sig) == 128 + sig
    assert "stopped (warm stop)" in proc.log()


def test_keeps_serving_while_redis_is_down_and_catches_up_after(start_redis: object) -> None:
    redis_srv = start_redis()  # type: ignore[operator]
    server = WeightserverProcess(redis_srv.url, "r1")
    try:
        WeightStore(redis.Redis.from_url(redis_srv.url), "r1").publish(*make_weights(1))
        server.wait_for_log("now serving version 1")
        redis_srv.stop()
        server.wait_for_log("cannot reach Redis")
        with WeightsClient(server.endpoint, timeout_ms=10_000) as client:
            assert client.ping()["redis"] == "down"
            held = client.get_newer(-1)
            assert held is not None and held[0].version == 1
            assert client.get_newer(1) is None
            redis_srv.start()  # empty: this test's Redis keeps no snapshot
            WeightStore(redis.Redis.from_url(redis_srv.url), "r1").publish(*make_weights(2))
            newer = client.get_newer(1, wait_ms=30_000)
            assert newer is not None and newer[0].version == 2
        server.wait_for_log("reachable again")
        assert server.proc.poll() is None
    finally:
        assert server.stop() == 128 + signal.SIGTERM


def test_a_corrupt_version_in_redis_is_not_served(
    server: WeightserverProcess, redis_client: redis.Redis
) -> None:
    store = WeightStore(redis_client, "r1")
    store.publish(*make_weights(1))
    server.wait_for_log("now serving version 1")
    header, blob = make_weights(2)
    keys = RunKeys("r1")
    bad = bytearray(blob)
    bad[0] ^= 0xFF
    redis_client.hset(
        keys.weights(2), mapping={HEADER_FIELD: header.pack(), BLOB_FIELD: bytes(bad)}
    )
    redis_client.set(keys.latest, 2)
    redis_client.publish(keys.channel, "2")
    server.wait_for_log("version 2 in Redis is invalid")
    with WeightsClient(server.endpoint) as client:
        got = client.get_newer(-1)
        assert got is not None and got[0].version == 1
        store.publish(*make_weights(3))  # the next good version gets through
        newer = client.get_newer(1, wait_ms=20_000)
        assert newer is not None and newer[0].version == 3


def test_client_times_out_then_recovers_when_a_server_appears(redis_url: str) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    WeightStore(redis.Redis.from_url(redis_url), "r1").publish(*make_weights(1))
    with WeightsClient(endpoint, timeout_ms=200) as client:
        with pytest.raises(WeightsTimeoutError):
            client.get_newer(-1)
        server = WeightserverProcess(redis_url, "r1", bind=endpoint)
        try:
            server.wait_for_log("now serving version 1")
            client.timeout_ms = 10_000
            got = client.get_newer(-1)
            assert got is not None and got[0].version == 1
            assert client.reconnects >= 1
        finally:
            server.stop()


def test_two_replicas_serve_the_same_run(server: WeightserverProcess, redis_url: str) -> None:
    WeightStore(redis.Redis.from_url(redis_url), "r1").publish(*make_weights(4))
    replica = WeightserverProcess(redis_url, "r1")
    try:
        for proc in (server, replica):
            proc.wait_for_log("now serving version 4")
        with WeightsClient([server.endpoint, replica.endpoint], timeout_ms=10_000) as client:
            for _ in range(4):  # round-robin: both replicas answer
                got = client.get_newer(-1)
                assert got is not None and got[0].version == 4
    finally:
        replica.stop()


def test_bind_failure_is_one_line_not_a_traceback(server: WeightserverProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "weightserver", "--bind", server.endpoint],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert "cannot bind" in out.stderr and "Traceback" not in out.stderr


def test_metrics_port_exposes_the_held_version(redis_url: str) -> None:
    import urllib.request

    WeightStore(redis.Redis.from_url(redis_url), "r1").publish(*make_weights(5))
    port = free_port()
    server = WeightserverProcess(redis_url, "r1", "--metrics-port", str(port))
    try:
        server.wait_for_log("now serving version 5")
        with WeightsClient(server.endpoint) as client:
            client.get_newer(-1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert "ppomq_weightserver_version 5.0" in text
        assert 'ppomq_weightserver_replies_total{status="weights"} 1.0' in text
    finally:
        server.stop()
