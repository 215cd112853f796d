"""The receiving thread's budget for refused messages (issue 17): junk at any rate costs
the learner a bounded share of its CPU, every refused message is still counted, and a valid
batch sent after a flood still arrives."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from ppomq.embedded_redis import free_port
from ppomq.learner.receiver import BatchReceiver, RejectBudget
from ppomq.proto import encode
from ppomq.transport import RolloutReceiver, RolloutSender
from tests.proto.factory import make_batch, make_spec


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
    receiver = BatchReceiver(
        make_socket=lambda: RolloutReceiver(addr), spec=spec, out=out, rejects_per_s=50.0
    )
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
        assert receiver.snapshot() == (1, {"header_not_msgpack": flood})
    finally:
        receiver.stop()
        receiver.join(timeout=5)
    assert not receiver.is_alive()


def test_a_stale_batch_is_refused_at_the_door_and_counted_as_the_loop_would():
    """Below `stale_below` (the loop's version - max_staleness) a valid batch is refused
    here, never queued: counted as stale, its env steps as discarded, its sender for the
    ledger; a batch at the bound still goes through."""
    spec = make_spec()
    addr = f"tcp://127.0.0.1:{free_port()}"
    out: queue.Queue = queue.Queue(maxsize=4)
    receiver = BatchReceiver(make_socket=lambda: RolloutReceiver(addr), spec=spec, out=out)
    receiver.stale_below = 7
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
        assert receiver.snapshot() == (1, {"stale": 1})
        assert receiver.stale_refused() == (1, old.num_steps * old.num_envs)
        assert receiver.drain_attributed() == [("old", "stale", 3)]
    finally:
        receiver.stop()
        receiver.join(timeout=5)
