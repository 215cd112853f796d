"""Code that runs in the child processes of the transport tests (spawned, so importable)."""

from __future__ import annotations

from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event

import msgpack
import numpy as np
import psutil
import zmq

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender
from ppomq.proto import DecodeError, SeqTracker, decode, encode

FUZZ_MAX_MESSAGE = 4 << 20  # above the spec's 256 KiB cap, so decode (not ZeroMQ) sees oversize


def decoding_receiver(conn: Connection, stop: Event, endpoint: str) -> None:
    """Decode every message against `make_spec()`; answer each with [reason code, RSS]."""
    spec = make_spec()
    seqs = SeqTracker()
    proc = psutil.Process()
    reply = zmq.Context.instance().socket(zmq.PUSH)
    reply.setsockopt(zmq.LINGER, 1000)
    port = reply.bind_to_random_port("tcp://127.0.0.1")
    with RolloutReceiver(endpoint, hwm=16, max_message_bytes=FUZZ_MAX_MESSAGE) as rx:
        conn.send((rx.endpoint, f"tcp://127.0.0.1:{port}"))
        while not stop.is_set():
            frames = rx.recv(timeout_ms=100)
            if frames is None:
                continue
            try:
                batch = decode(frames, spec, seqs)
                seqs.record(batch.actor_id, batch.seq)  # as the learner does on acceptance
                code = 0
            except DecodeError as exc:
                code = exc.reason.code
            del frames
            reply.send(msgpack.packb([code, proc.memory_info().rss]))
    reply.close()


def ordered_sender(endpoint: str, count: int, seed: int, received: Event) -> None:
    """Send batches seq 0..count-1 (contents derived from the seq) and exit cleanly."""
    spec = make_spec(t=128, n=8, obs_shape=(4,))
    with RolloutSender(endpoint) as tx:
        for seq in range(count):
            batch = make_batch(spec, np.random.default_rng(seed + seq), seq=seq)
            if not tx.send(encode(batch), timeout_ms=20_000):
                raise SystemExit(3)
        # Closing a PUSH socket while the peer's queue is full can drop the last messages
        # whatever the linger (libzmq#3774), so the socket stays open until they arrived.
        received.wait(60)
    zmq.Context.instance().term()


def stuck_sender(endpoint: str, linger_ms: int) -> None:
    """Queue messages toward a frozen peer until refused, then close and leave."""
    with RolloutSender(endpoint, hwm=2, heartbeat_ivl_ms=0, linger_ms=linger_ms) as tx:
        sent = 0
        payload = [b"x" * 1024, bytes(1 << 20)]
        while tx.send(payload, timeout_ms=300):
            sent += 1
            if sent > 10_000:
                raise SystemExit(4)
    # A clean shutdown terminates the context: it blocks while sockets linger.
    zmq.Context.instance().term()


def echo_seq_receiver(conn: Connection, stop: Event) -> None:
    """Report the first 8 bytes (a seq) of every message's first frame to the parent."""
    reply = zmq.Context.instance().socket(zmq.PUSH)
    reply.setsockopt(zmq.LINGER, 1000)
    port = reply.bind_to_random_port("tcp://127.0.0.1")
    with RolloutReceiver(
        "tcp://127.0.0.1:0", hwm=1, heartbeat_ivl_ms=100, heartbeat_timeout_ms=500
    ) as rx:
        conn.send((rx.endpoint, f"tcp://127.0.0.1:{port}"))
        while not stop.is_set():
            frames = rx.recv(timeout_ms=50)
            if frames is not None:
                reply.send(frames[0].bytes[:8])
    reply.close()
