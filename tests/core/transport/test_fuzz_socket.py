"""10,000+ bad rollout messages through a real socket to a real decoding process."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.messages.badmsgs import Generator, HypothesisSource, RngSource
from benchmarks.messages.factory import make_spec
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import Reason
from tests.core.transport.peers import FUZZ_MAX_MESSAGE, decoding_receiver

BAD_MESSAGES = 10_000
HYPOTHESIS_EXAMPLES = 1_500
RSS_GROWTH_LIMIT = 64 << 20  # generous: a leak of even 7 KiB per message would pass it


class _Peer:
    """The parent's side of the conversation: send one message, read back its verdict."""

    def __init__(self, tx: RolloutSender, replies: zmq.Socket) -> None:
        self.tx, self.replies = tx, replies
        self.rss: list[int] = []

    def verdict(self, frames: list[bytes]) -> int:
        assert self.tx.send(frames, timeout_ms=10_000), "the receiver stopped taking messages"
        assert self.replies.poll(10_000), "the receiver stopped answering"
        code, rss = msgpack.unpackb(self.replies.recv())
        self.rss.append(rss)
        return code


@pytest.mark.slow  # about 25 s: the full test tier's, not `make test`'s
def test_ten_thousand_bad_messages_over_tcp_each_rejected_with_its_reason():
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    stop = ctx.Event()
    proc = ctx.Process(target=decoding_receiver, args=(child, stop, "tcp://127.0.0.1:0"))
    proc.start()
    try:
        assert parent.poll(60), "receiver process did not start"
        endpoint, reply_endpoint = parent.recv()
        replies = zmq.Context.instance().socket(zmq.PULL)
        replies.setsockopt(zmq.LINGER, 0)
        replies.connect(reply_endpoint)
        with RolloutSender(endpoint, hwm=16, max_message_bytes=FUZZ_MAX_MESSAGE) as tx:
            peer = _Peer(tx, replies)
            gen = Generator(make_spec(), np.random.default_rng(2024))
            bad = Counter[str]()
            wrong: list[tuple[str, int, int]] = []

            def check(frames, reason, name) -> None:
                code = peer.verdict(frames)
                expected = 0 if reason is None else reason.code
                if code != expected:
                    wrong.append((name, expected, code))
                if reason is not None:
                    bad[reason.label] += 1

            frames, _ = gen.base()  # one accepted batch, so that seq cases have a past
            assert peer.verdict(frames) == 0
            gen.last_good = gen.seq

            # Part 1: hypothesis drives the catalogue (shrinks a failure to its essence).
            @settings(
                max_examples=HYPOTHESIS_EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(st.data())
            def through_socket(data) -> None:
                check(*gen.make(HypothesisSource(data)))

            through_socket()
            hypothesis_bad = sum(bad.values())
            # Part 2: a seeded generator, random and mutated real frames, up to the count.
            src = RngSource(np.random.default_rng(7))
            while sum(bad.values()) < BAD_MESSAGES:
                check(*gen.make(src))
            rss_after_warmup = peer.rss[200]
            # Part 3: after all that, a valid batch is still accepted.
            frames, _ = gen.base()
            assert peer.verdict(frames) == 0
            assert proc.is_alive()
        replies.close()
    finally:
        stop.set()
        proc.join(20)
        if proc.is_alive():
            proc.kill()
    assert not wrong, f"{len(wrong)} messages got the wrong reason, e.g. {wrong[:5]}"
    assert hypothesis_bad > 0 and sum(bad.values()) >= BAD_MESSAGES
    # Every rejection reason decode can give was exercised through the socket.
    # Every reason decode gives (not the gate's, the weights', the key or episode check's).
    later = {"stale", "checksum", "actor_id_not_key", "episodes_mismatch"}
    assert set(bad) == {r.label for r in Reason} - later, bad
    assert peer.rss[-1] - rss_after_warmup < RSS_GROWTH_LIMIT, (rss_after_warmup, peer.rss[-1])
    assert proc.exitcode == 0
