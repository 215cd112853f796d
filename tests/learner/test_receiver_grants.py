"""The receiving thread holds batches to their actors' grants before decoding them, and
records the hellos of actors holding none."""

from __future__ import annotations

import queue

import numpy as np

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender
from ppomq.learner.door import Door
from ppomq.learner.grants import GrantBook, Grants
from ppomq.learner.receiver import BatchReceiver
from ppomq.proto import SeqTracker, encode, encode_hello
from tests.support.ports import free_port
from tests.support.waiting import wait_until


def _receiving(book: GrantBook, door: Door, ungranted_per_s: float = 5000.0):
    spec = make_spec()
    addr = f"tcp://127.0.0.1:{free_port()}"
    out: queue.Queue = queue.Queue(maxsize=64)
    receiver = BatchReceiver(
        make_socket=lambda: RolloutReceiver(addr), spec=spec, out=out, door=door,
        seqs=SeqTracker(), grants=book, ungranted_per_s=ungranted_per_s,
    )  # fmt: skip
    receiver.start()
    assert receiver.ready.wait(10)
    return spec, addr, out, receiver


def test_batches_beyond_a_grant_are_dropped_unread_and_counted_as_surplus():
    book = GrantBook(timeout_s=3.0, max_actors=100)
    book.set(4, Grants({"granted": 2, "idle": 0}, 0))
    door = Door()
    spec, addr, out, receiver = _receiving(book, door)
    rng = np.random.default_rng(0)
    try:
        with RolloutSender(addr) as sender:
            for seq in range(4):
                batch = make_batch(spec, rng, actor_id="granted", seq=seq)
                batch.policy_version = 4
                assert sender.send(encode(batch), timeout_ms=10_000)
            idle = make_batch(spec, rng, actor_id="idle", seq=0)
            idle.policy_version = 4
            assert sender.send(encode(idle), timeout_ms=10_000)
            # Junk named by nobody still goes to decode, which refuses it by reason.
            assert sender.send([b"\xc1", b"x"], timeout_ms=10_000)
            wait_until(lambda: sum(door.snapshot()[1].values()) == 1, 30, "the junk refused")
        got = [out.get(timeout=10) for _ in range(2)]
        assert [b.seq for b in got] == [0, 1] and out.empty()
        tally = door.take()
        steps = spec.num_steps * got[0].num_envs
        assert (tally.discarded_batches, tally.discarded_env_steps) == (3, 3 * steps)
        assert sorted(tally.attributed) == [("granted", "surplus", None, None)] * 2 + [
            ("idle", "surplus", None, None)
        ]
        # Dropped before decode: never passed on, never refused by reason.
        assert door.snapshot() == (2, {"header_not_msgpack": 1})
    finally:
        receiver.stop()
        receiver.join(timeout=5)


def test_a_hello_makes_an_actor_known_and_is_never_queued_or_refused():
    book = GrantBook(timeout_s=3.0, max_actors=100)
    door = Door()
    spec, addr, out, receiver = _receiving(book, door)
    try:
        with RolloutSender(addr) as sender:
            assert sender.send(encode_hello(run_id=spec.run_id, actor_id="new"), 10_000)
            # Another run's hello is not this run's actor: decode refuses it.
            assert sender.send(encode_hello(run_id="other", actor_id="stray"), 10_000)
            wait_until(lambda: door.snapshot()[1], 30, "the other run's hello refused")
        assert book.plan_inputs()[0] == ["new"]
        assert out.empty() and door.snapshot()[0] == 0
    finally:
        receiver.stop()
        receiver.join(timeout=5)


def test_a_flood_under_one_id_costs_a_header_read_each_and_honest_batches_get_through():
    """One sender floods well-formed batches of the current version under its id: beyond
    its grant each is dropped unread (and paced by the reject budget), and an honest
    actor's granted batch sent meanwhile is still queued."""
    book = GrantBook(timeout_s=3.0, max_actors=100)
    book.set(0, Grants({"flood": 1, "honest": 1}, 0))
    door = Door()
    spec, addr, out, receiver = _receiving(book, door, ungranted_per_s=200.0)
    rng = np.random.default_rng(1)
    flooding = make_batch(spec, rng, actor_id="flood", seq=0)
    flooding.policy_version = 0
    frames = encode(flooding)
    honest_batch = make_batch(spec, rng, actor_id="honest", seq=0)
    honest_batch.policy_version = 0
    flood = 300
    try:
        with RolloutSender(addr) as flooder, RolloutSender(addr) as honest:
            for _ in range(flood):
                assert flooder.send(frames, timeout_ms=10_000)
            assert honest.send(encode(honest_batch), timeout_ms=10_000)
            ids = sorted(out.get(timeout=30).actor_id for _ in range(2))
            assert ids == ["flood", "honest"]
            dropped: list[int] = []

            def all_dropped() -> bool:
                dropped.append(door.take().discarded_batches)
                return sum(dropped) == flood - 1

            wait_until(all_dropped, 30, "the flood beyond its grant dropped")
        assert out.empty() and door.snapshot() == (2, {})  # two decoded, nothing refused
    finally:
        receiver.stop()
        receiver.join(timeout=5)
