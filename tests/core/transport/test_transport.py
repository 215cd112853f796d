"""The rollout transport over real sockets and real processes: order, liveness, shutdown."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import tempfile
import threading

import numpy as np
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.core.transport.rollouts import MessageTooLarge, RolloutReceiver, RolloutSender
from ppomq.proto import SeqTracker, decode, encode
from tests.core.transport.peers import echo_seq_receiver, ordered_sender, stuck_sender
from tests.support import wait_until

SPAWN = mp.get_context("spawn")


@pytest.fixture
def ipc_dir():
    # Short path: ipc:// addresses are limited to ~100 bytes.
    with tempfile.TemporaryDirectory(prefix="ppomq-", dir="/tmp") as d:
        yield d


@pytest.mark.parametrize("scheme", ["tcp", "ipc"])
def test_batches_from_a_sender_process_arrive_intact_and_in_order(scheme, ipc_dir):
    count, seed = 60, 100
    bind = "tcp://127.0.0.1:0" if scheme == "tcp" else f"ipc://{ipc_dir}/rollouts"
    spec = make_spec(t=128, n=8, obs_shape=(4,))
    with RolloutReceiver(bind, hwm=4) as rx:
        received = SPAWN.Event()
        proc = SPAWN.Process(target=ordered_sender, args=(rx.endpoint, count, seed, received))
        proc.start()
        try:
            seqs = SeqTracker()
            for seq in range(count):
                frames = rx.recv(timeout_ms=30_000)
                assert frames is not None, f"batch {seq} never came"
                batch = decode(frames, spec, seqs)  # SeqTracker: order is checked too
                seqs.record(batch.actor_id, batch.seq)  # as the learner does on acceptance
                assert batch.seq == seq
                want = make_batch(spec, np.random.default_rng(seed + seq), seq=seq)
                for name, arr in want.arrays.items():
                    np.testing.assert_array_equal(batch.arrays[name], arr, err_msg=name)
            received.set()
            assert rx.recv(timeout_ms=200) is None  # nothing extra, nothing duplicated
            proc.join(30)
            assert proc.exitcode == 0
        finally:
            if proc.is_alive():
                proc.kill()


def test_send_to_an_absent_learner_times_out_instead_of_queueing():
    # A port bound but never listened on: connections are refused, and no other process
    # can take the port while the test runs (a merely free port could be reused).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{held.getsockname()[1]}"
        with RolloutSender(endpoint) as tx:
            assert tx.send([b"header", b"body"], timeout_ms=100) is False
            assert tx.send([b"header", b"body"], timeout_ms=0) is False
    assert tx.closed


def test_backpressure_send_returns_false_when_the_queues_are_full():
    with RolloutReceiver("tcp://127.0.0.1:0", hwm=1) as rx, RolloutSender(rx.endpoint, hwm=1) as tx:
        big = [bytes(4 << 20)]  # bigger than the kernel's socket buffers
        assert tx.send(big, timeout_ms=5_000)
        results = [tx.send(big, timeout_ms=100) for _ in range(20)]
        assert results.count(False) > 0  # nobody reads: the queues fill and send gives up
        assert rx.recv(timeout_ms=5_000) is not None  # the first one was delivered


def test_a_frame_over_max_message_bytes_drops_the_connection_and_the_sender_recovers():
    with (
        RolloutReceiver("tcp://127.0.0.1:0", max_message_bytes=1 << 16) as rx,
        RolloutSender(rx.endpoint, max_message_bytes=1 << 30) as tx,
    ):
        assert tx.send([b"h", bytes(1 << 17)], timeout_ms=5_000)
        assert rx.recv(timeout_ms=500) is None  # ZeroMQ refused it before buffering it
        delivered = None
        for _ in range(100):  # the sender reconnects by itself
            if tx.send([b"small"], timeout_ms=100):
                delivered = rx.recv(timeout_ms=200)
                if delivered is not None:
                    break
        assert delivered is not None and delivered[0].bytes == b"small"


def test_sender_refuses_a_message_over_its_cap_and_an_empty_one():
    with RolloutSender("tcp://127.0.0.1:1", max_message_bytes=1 << 16) as tx:
        with pytest.raises(MessageTooLarge):
            tx.send([b"h", np.zeros(1 << 15)], timeout_ms=0)
        with pytest.raises(ValueError):
            tx.send([], timeout_ms=0)
        with pytest.raises(ValueError):
            tx.send([b"x"], timeout_ms=-1)


def test_receiver_returns_zero_copy_frames_and_none_on_timeout(ipc_dir):
    with (
        RolloutReceiver(f"ipc://{ipc_dir}/r") as rx,
        RolloutSender(rx.endpoint) as tx,
    ):
        assert rx.recv(timeout_ms=10) is None
        spec = make_spec()
        batch = make_batch(spec, np.random.default_rng(0))
        assert tx.send(encode(batch), timeout_ms=5_000)
        frames = rx.recv(timeout_ms=5_000)
        assert frames is not None and all(isinstance(f, zmq.Frame) for f in frames)
        assert decode(frames, spec).arrays["obs"].shape == batch.arrays["obs"].shape
    # Closing the bound socket removes its file (ZeroMQ does it in the background).
    wait_until(lambda: not os.path.exists(f"{ipc_dir}/r"), 10, "the ipc file to go")


def _events(monitor: zmq.Socket, timeout_s: float, want: int) -> list[int]:
    seen = []
    deadline_ms = int(timeout_s * 1000)
    while monitor.poll(deadline_ms):
        event = recv_monitor_message(monitor)["event"]
        seen.append(event)
        if event == want:
            break
    return seen


def test_heartbeats_drop_a_frozen_learner_and_the_sender_reconnects_when_it_returns():
    parent, child = SPAWN.Pipe()
    stop = SPAWN.Event()
    proc = SPAWN.Process(target=echo_seq_receiver, args=(child, stop))
    proc.start()
    replies = zmq.Context.instance().socket(zmq.PULL)
    replies.setsockopt(zmq.LINGER, 0)
    stopped = False
    try:
        assert parent.poll(60)
        endpoint, reply_endpoint = parent.recv()
        replies.connect(reply_endpoint)
        got: list[int] = []

        def drain(timeout_ms: int) -> None:
            while replies.poll(timeout_ms):
                got.append(int.from_bytes(replies.recv(), "little"))
                timeout_ms = 50

        with RolloutSender(
            endpoint, hwm=1, heartbeat_ivl_ms=100, heartbeat_timeout_ms=500, linger_ms=0
        ) as tx:
            monitor = tx.socket.get_monitor_socket()
            seq = 0

            def send(timeout_ms: int) -> bool:
                nonlocal seq
                ok = tx.send([seq.to_bytes(8, "little"), bytes(256 << 10)], timeout_ms=timeout_ms)
                seq += ok
                return ok

            assert send(10_000)
            drain(5_000)
            assert got == [0]
            os.kill(proc.pid, signal.SIGSTOP)  # alive to the kernel, silent to ZeroMQ
            stopped = True
            # The heartbeat notices within its timeout (the TCP connection itself is fine).
            assert zmq.EVENT_DISCONNECTED in _events(monitor, 10, zmq.EVENT_DISCONNECTED)
            # With the link gone, IMMEDIATE keeps new batches from queueing toward it.
            assert not send(300)
            os.kill(proc.pid, signal.SIGCONT)
            stopped = False
            wait_until(lambda: send(100), 20, "the sender to reconnect")
            last = seq - 1
            drain(5_000)
            assert got[-1] == last
            assert got == sorted(set(got)), f"late or repeated batches: {got}"
            tx.socket.disable_monitor()  # before closing the monitor: the other way hangs
            monitor.close(linger=0)
    finally:
        if stopped:
            os.kill(proc.pid, signal.SIGCONT)
        stop.set()
        proc.join(20)
        if proc.is_alive():
            proc.kill()
        replies.close()


def test_a_sender_with_unsent_batches_exits_promptly_with_bounded_linger():
    parent, child = SPAWN.Pipe()
    stop = SPAWN.Event()
    rx_proc = SPAWN.Process(target=echo_seq_receiver, args=(child, stop))
    rx_proc.start()
    try:
        assert parent.poll(60)
        endpoint, _ = parent.recv()
        os.kill(rx_proc.pid, signal.SIGSTOP)  # accepts TCP, never reads: sends pile up
        tx_proc = SPAWN.Process(target=stuck_sender, args=(endpoint, 200))
        tx_proc.start()
        tx_proc.join(60)  # generous: only a hang (unbounded linger) would exceed it
        alive = tx_proc.is_alive()
        if alive:
            tx_proc.kill()
        assert not alive, "sender process hung on exit with queued messages"
        assert tx_proc.exitcode == 0
    finally:
        os.kill(rx_proc.pid, signal.SIGCONT)
        stop.set()
        rx_proc.join(20)
        if rx_proc.is_alive():
            rx_proc.kill()


def test_close_from_another_state_is_idempotent_and_context_managers_close():
    rx = RolloutReceiver("tcp://127.0.0.1:0")
    tx = RolloutSender(rx.endpoint)
    done = threading.Event()

    def closer() -> None:
        tx.close()
        tx.close()
        rx.close()
        done.set()

    threading.Thread(target=closer, daemon=True).start()
    assert done.wait(10)
    assert tx.closed and rx.closed
