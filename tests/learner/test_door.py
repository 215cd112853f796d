"""The Door: the receiving thread's tally, taken by the training thread once, and its bounds."""

from __future__ import annotations

import numpy as np

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.learner.door import Door


def _batch(actor_id: str, seq: int = 0):
    batch = make_batch(make_spec(), np.random.default_rng(seq), actor_id=actor_id, seq=seq)
    batch.sent = seq + 1
    return batch


def test_a_tally_is_taken_once_and_the_reject_totals_run_on():
    door = Door()
    stale = _batch("old")
    door.count_stale(stale)
    door.refuse("bad_shape", None)
    door.refuse("future_version", ("forger", "future_version", 1, 0))
    tally = door.take()
    assert (tally.discarded_batches, tally.discarded_env_steps) == (
        1,
        stale.num_steps * stale.num_envs,
    )
    assert tally.attributed == [("old", "stale", 1, 0), ("forger", "future_version", 1, 0)]
    assert tally.unattributed == {"bad_shape": 1}
    assert tally.rejects == {"stale": 1, "bad_shape": 1, "future_version": 1}
    again = door.take()
    assert again.discarded_batches == 0 and again.attributed == [] and not again.unattributed
    assert again.rejects == tally.rejects  # totals since the door opened


def test_surplus_is_discarded_and_attributed_but_not_a_refusal():
    door = Door()
    door.count_surplus(_batch("fast", seq=3))
    tally = door.take()
    assert tally.discarded_batches == 1 and tally.rejects == {}
    assert tally.attributed == [("fast", "surplus", 4, 3)]


def test_beyond_the_attribution_cap_refusals_are_counted_unattributed():
    door = Door(max_attributed=2)
    for i in range(5):
        door.refuse("stale", (f"a{i}", "stale", None, None))
    tally = door.take()
    assert [a[0] for a in tally.attributed] == ["a0", "a1"]
    assert tally.unattributed == {"stale": 3}
    assert door.snapshot() == (0, {"stale": 5})


def test_bounds_start_open_and_are_set_together():
    door = Door()
    assert (door.stale_below, door.future_above) == (None, None)
    door.set_bounds(stale_below=3, future_above=7)
    assert (door.stale_below, door.future_above) == (3, 7)
