"""Admission alone, without a loop or sockets: what it trains on, what it counts, and that
forgetting an actor drops every piece of its state."""

from __future__ import annotations

import numpy as np

from benchmarks.messages.factory import make_batch, make_spec, whole_episodes
from ppomq.learner.admission import Admission
from ppomq.learner.door import Door
from ppomq.learner.episodes import EpisodeBook
from ppomq.proto import SeqTracker


def _admission(door: Door | None = None, **overrides) -> Admission:
    kw = dict(max_staleness=1, actor_timeout_s=5.0, actors_hint=1, max_actors=100,
              forget_actor_after_s=60.0)  # fmt: skip
    kw.update(overrides)
    return Admission(**kw, door=door or Door(), seqs=SeqTracker(), book=EpisodeBook(max_actors=100))


def _batch(actor_id: str, seq: int, version: int):
    batch = make_batch(make_spec(), np.random.default_rng(seq), actor_id=actor_id, seq=seq)
    batch.policy_version, batch.sent = version, seq + 1
    return whole_episodes(batch)  # episodes its own data makes: only the gate decides


def test_it_trains_on_fresh_batches_and_counts_the_rest_as_discarded():
    adm = _admission()
    assert adm.admit(_batch("a", 0, 5), version=5)
    assert adm.admit(_batch("a", 1, 4), version=5)  # one behind: within max_staleness 1
    stale = _batch("a", 2, 3)
    assert not adm.admit(stale, version=5)
    assert not adm.admit(_batch("a", 3, 6), version=5)  # a version not yet published
    assert not adm.admit(_batch("a", 1, 5), version=5)  # seq 1 again: a duplicate
    assert adm.gate.accepted == 2 and adm.produced_batches == 5
    assert adm.rejects() == {"stale": 1, "future_version": 1, "seq_not_increasing": 1}
    steps = stale.num_steps * stale.num_envs
    assert adm.discarded_env_steps == 3 * steps
    assert adm.waste_ratio() == 3 / 5
    row = adm.ledger.actors["a"]
    assert (row["accepted"], row["stale"], row["duplicates"]) == (2, 1, 1)
    assert adm.actors["a"]["env_steps"] == 2 * steps


def test_forgetting_an_actor_drops_all_its_state():
    adm = _admission()
    assert adm.admit(_batch("a", 0, 5), version=5)
    adm.forget(["a"])
    assert "a" not in adm.actors and "a" not in adm.roster.live()
    assert adm.admit(_batch("a", 0, 5), version=5)  # its seq was forgotten too


def test_the_doors_tally_reaches_the_counts_and_the_ledger_and_its_bounds_move():
    door = Door()
    adm = _admission(door)
    door.count_stale(_batch("late", 7, 1))
    door.refuse("bad_shape", None)
    door.refuse("seq_not_increasing", ("dup", "seq_not_increasing", 3, 9))
    adm.take_door(version=5)
    assert (door.stale_below, door.future_above) == (3, 5)  # one version of slack
    assert adm.produced_batches == 1 and adm.discarded_env_steps > 0
    assert adm.ledger.actors["late"]["stale"] == 1
    assert adm.ledger.actors["dup"]["duplicates"] == 1  # the door's seq refusal
    assert adm.ledger.totals["unattributed"] == {"bad_shape": 1}
    assert adm.rejects() == {"stale": 1, "bad_shape": 1, "seq_not_increasing": 1}


def test_its_state_goes_through_a_checkpoint():
    adm = _admission()
    assert adm.admit(_batch("a", 0, 5), version=5)
    assert not adm.admit(_batch("a", 1, 1), version=5)
    back = _admission()
    back.set_state(adm.get_state())
    assert back.produced_batches == 2 and back.gate.accepted == 1
    assert back.rejects() == adm.rejects()
    assert back.actors == adm.actors and back.ledger.actors == adm.ledger.actors
