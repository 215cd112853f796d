"""The receiving thread: its budget for refused messages (junk at any rate costs the learner
a bounded share of its CPU, every refused message is still counted, and a valid batch sent
after a flood still arrives), and what it refuses at the door, told to the Door."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender
from ppomq.learner.door import Door
from ppomq.learner.receiver import BatchQueue, BatchReceiver, RejectBudget
from ppomq.proto import SeqTracker, encode
from tests.support.ports import free_port
from tests.support.waiting import wait_until


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reject_budget_pauses_beyond_its_rate_and_refills_with_time():
    clock = _Clock()
    budget = RejectBudget(10.0, clock=clock)
    assert [budget.spend() for _ in range(10)] == [0.0] * 10  # one second's burst
    assert budget.spend() == pytest.approx(0.1)  # the 11th within the same instant: wait one token
    clock.now += 0.1  # the pause taken: the next one waits again, no more
    assert budget.spend() == pytest.approx(0.1)
    clock.now += 60.0  # a long quiet spell refills one second's budget, never more
    assert [budget.spend() for _ in range(10)] == [0.0] * 10
    assert budget.spend() > 0.0


def test_a_throttled_flood_is_counted_whole_and_a_valid_batch_still_arrives():
    spec = make_spec()
    addr = f"tcp://127.0.0.1:{free_port()}"
    out: queue.Queue = queue.Queue(maxsize=4)
    door = Door()
    receiver = BatchReceiver(
        make_socket=lambda: RolloutReceiver(addr), spec=spec, out=out, door=door,
        seqs=SeqTracker(), rejects_per_s=50.0,
    )  # fmt: skip
    receiver.start()
    assert receiver.ready.wait(10)
    flood = 120  # 50 in the burst, then 20 ms each
    valid = encode(make_batch(spec, np.random.default_rng(0), actor_id="honest"))
    try:
        with RolloutSender(addr) as sender:
            for _ in range(flood):
                assert sender.send([b"\xc1 not msgpack", *valid[1:]], timeout_ms=10_000)
            assert sender.send(valid, timeout_ms=10_000)
            batch = out.get(timeout=30)
        assert batch.actor_id == "honest"
        assert door.snapshot() == (1, {"header_not_msgpack": flood})
    finally:
        receiver.stop()
        receiver.join(timeout=5)
    assert not receiver.is_alive()


def test_a_stale_batch_is_refused_at_the_door_and_counted_as_the_loop_would():
    """Below the door's `stale_below` (the loop's version - max_staleness) a valid batch is
    refused here, never queued: counted as stale, its env steps as discarded, its sender
    for the ledger; a batch at the bound still goes through."""
    spec = make_spec()
    addr = f"tcp://127.0.0.1:{free_port()}"
    out: queue.Queue = queue.Queue(maxsize=4)
    door = Door()
    door.set_bounds(stale_below=7, future_above=100)
    receiver = BatchReceiver(make_socket=lambda: RolloutReceiver(addr), spec=spec, out=out,
                             door=door, seqs=SeqTracker())  # fmt: skip
    rng = np.random.default_rng(0)
    old = make_batch(spec, rng, actor_id="old", seq=0)
    old.policy_version, old.sent = 6, 3
    fresh = make_batch(spec, rng, actor_id="fresh", seq=0)
    fresh.policy_version = 7
    receiver.start()
    assert receiver.ready.wait(10)
    try:
        with RolloutSender(addr) as sender:
            assert sender.send(encode(old), timeout_ms=10_000)
            assert sender.send(encode(fresh), timeout_ms=10_000)
            assert out.get(timeout=30).actor_id == "fresh"
        assert out.empty()
        assert door.snapshot() == (1, {"stale": 1})
        tally = door.take()
        assert (tally.discarded_batches, tally.discarded_env_steps) == (
            1, old.num_steps * old.num_envs,
        )  # fmt: skip
        assert tally.attributed == [("old", "stale", 3, 0)]
        assert door.take().attributed == []  # taken once
    finally:
        receiver.stop()
        receiver.join(timeout=5)


@pytest.mark.parametrize("drop_oldest", [True, False])
def test_a_full_queue_drops_its_oldest_batch_in_async_mode_and_blocks_in_sync_mode(drop_oldest):
    """Async (drop_oldest): with the queue full, each new batch pushes the oldest queued one
    out, counted as surplus (batches, env steps, its sender for the ledger): what is left
    is the newest. Sync: the thread stops reading instead (backpressure), losing nothing."""
    spec = make_spec()
    addr = f"tcp://127.0.0.1:{free_port()}"
    out: queue.Queue = BatchQueue(maxsize=2)
    door = Door()
    receiver = BatchReceiver(make_socket=lambda: RolloutReceiver(addr), spec=spec, out=out,
                             door=door, seqs=SeqTracker(), drop_oldest=drop_oldest)  # fmt: skip
    rng = np.random.default_rng(0)
    batches = [make_batch(spec, rng, actor_id="a", seq=i) for i in range(5)]
    for i, b in enumerate(batches):
        b.sent = i + 1
    receiver.start()
    assert receiver.ready.wait(10)
    try:
        with RolloutSender(addr) as sender:
            for b in batches:
                assert sender.send(encode(b), timeout_ms=10_000)
            if drop_oldest:
                taken = []

                def three_dropped() -> bool:
                    taken.append(door.take())
                    return sum(t.discarded_batches for t in taken) == 3

                wait_until(three_dropped, 30, "three batches dropped as surplus")
                steps = batches[0].num_steps * batches[0].num_envs
                assert sum(t.discarded_env_steps for t in taken) == 3 * steps
                want = [("a", "surplus", i, i - 1) for i in (1, 2, 3)]  # (.., sent, seq)
                assert [a for t in taken for a in t.attributed] == want
                assert [out.get_nowait().seq for _ in range(2)] == [3, 4]  # the newest
            else:
                wait_until(out.full, 30, "a full queue")
                got = [out.get(timeout=30).seq for _ in range(5)]
                assert got == [0, 1, 2, 3, 4]  # nothing lost: the rest waited in the socket
                assert door.take().discarded_batches == 0
            assert door.snapshot() == (5, {})
    finally:
        receiver.stop()
        receiver.join(timeout=5)


def test_a_full_batch_queue_evicts_from_the_actor_with_the_most_batches_queued():
    spec = make_spec()
    rng = np.random.default_rng(0)
    q = BatchQueue(maxsize=4)
    batches = [make_batch(spec, rng, actor_id=a, seq=i) for i, a in enumerate("hffh")]
    for b in batches:
        assert q.put_evicting(b) is None
    # Full: the flooder "f" has as many queued as "h", so the oldest of all goes ("h"
    # seq 0); then "f" has the most and loses its own oldest, never the honest one's.
    evicted = q.put_evicting(make_batch(spec, rng, actor_id="f", seq=4))
    assert (evicted.actor_id, evicted.seq) == ("h", 0)
    evicted = q.put_evicting(make_batch(spec, rng, actor_id="f", seq=5))
    assert (evicted.actor_id, evicted.seq) == ("f", 1)
    assert [(b.actor_id, b.seq) for b in q.queue] == [("f", 2), ("h", 3), ("f", 4), ("f", 5)]
    assert q.get_nowait().seq == 2  # still a FIFO for the loop


def test_a_batch_of_a_version_not_yet_published_is_refused_at_the_door():
    spec = make_spec()
    addr = f"tcp://127.0.0.1:{free_port()}"
    out: queue.Queue = BatchQueue(maxsize=4)
    door = Door()
    door.set_bounds(stale_below=0, future_above=7)
    receiver = BatchReceiver(make_socket=lambda: RolloutReceiver(addr), spec=spec, out=out,
                             door=door, seqs=SeqTracker(), drop_oldest=True)  # fmt: skip
    rng = np.random.default_rng(0)
    future = make_batch(spec, rng, actor_id="forger", seq=0)
    future.policy_version, future.sent = 8, 1
    current = make_batch(spec, rng, actor_id="honest", seq=0)
    current.policy_version = 7
    receiver.start()
    assert receiver.ready.wait(10)
    try:
        with RolloutSender(addr) as sender:
            assert sender.send(encode(future), timeout_ms=10_000)
            assert sender.send(encode(current), timeout_ms=10_000)
            assert out.get(timeout=30).actor_id == "honest"
        assert out.empty()
        assert door.snapshot() == (1, {"future_version": 1})  # 1 valid: the honest one
        assert door.take().attributed == [("forger", "future_version", 1, 0)]
    finally:
        receiver.stop()
        receiver.join(timeout=5)


def test_drop_oldest_needs_a_batch_queue():
    with pytest.raises(TypeError, match="BatchQueue"):
        BatchReceiver(make_socket=lambda: None, spec=make_spec(), out=queue.Queue(),
                      door=Door(), seqs=SeqTracker(), drop_oldest=True)  # fmt: skip
