"""The rollout ledger (services/learner/ledger.py) alone, and kept by a LearnerLoop fed real
batches: it adds up, it is bounded, and its counts are published while no update comes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading

from prometheus_client import CollectorRegistry

from ppomq.commands.status import read_status
from ppomq.core.metrics import LearnerMetrics
from ppomq.core.signals import WarmStop
from ppomq.core.store.keys import RunKeys
from ppomq.learner.ledger import RolloutLedger
from tests.support import wait_until

from .test_loop import _sample, _setup


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _adds_up(t: dict) -> None:
    assert t["received"] == t["accepted"] + t["stale"] + t["duplicates"] + sum(
        t["invalid"].values()
    )


def test_ledger_adds_up_and_names_what_was_lost_in_flight():
    led = RolloutLedger(clock=_Clock())
    led.note("a", "accepted", sent=1, seq=0)
    led.note("a", "stale", sent=2, seq=1)
    led.note("a", "accepted", sent=5, seq=4)  # 3 and 4 never arrived
    led.note("a", "duplicate", sent=6, seq=5)
    led.note("b", "run_id")  # invalid, but its header named its sender (its `sent`: not taken)
    led.note("old", "accepted")  # a 1.0 actor: no `sent`, nothing claimed lost
    row = led.actors["a"]
    assert (row["sent"], row["received"], row["lost_in_flight"]) == (6, 4, 2)
    assert (row["accepted"], row["stale"], row["duplicates"]) == (2, 1, 1)
    t = led.totals_view()
    _adds_up(t)
    assert t["sent"] == 6 and t["lost_in_flight"] == 2 and t["invalid"] == {"run_id": 1}
    assert t["rejected"] == 3 and t["actors_trained"] == 2 and t["actors_seen"] == 3
    assert "learner restart" in led.summary()["lost_in_flight_means"]


def test_a_claimed_sent_is_bounded_by_the_seq_of_the_batch_that_claims_it():
    led = RolloutLedger(clock=_Clock())
    led.note("a", "accepted", sent=1, seq=0)
    led.note("a", "stale", sent=2**62, seq=1)  # no actor sends 2^62 messages by seq 1
    assert led.actors["a"]["sent"] == 2 and led.totals_view()["lost_in_flight"] == 0
    led.note_unattributed("header_not_msgpack", 3)
    assert led.totals_view()["unattributed"] == {"header_not_msgpack": 3}


def test_forgotten_and_dropped_actors_leave_the_rows_but_not_the_totals():
    clock = _Clock()
    led = RolloutLedger(max_actors=3, forget_after_s=60.0, clock=clock)
    dropped = []
    for i in range(10):
        dropped += led.note(f"f{i}", "stale", sent=1, seq=0)
    assert dropped == [f"f{i}" for i in range(7)] and list(led.actors) == ["f7", "f8", "f9"]
    clock.t += 30
    led.note("f9", "stale", sent=2, seq=1)
    clock.t += 45  # f7, f8 quiet for 75 s; f9 for 45 s
    assert led.prune() == ["f7", "f8"] and list(led.actors) == ["f9"]
    t = led.totals_view()
    assert t["actors_dropped_over_cap"] == 7 and t["actors_forgotten"] == 2
    assert t["received"] == 11 and t["stale"] == 11 and t["sent"] == 11
    assert t["actors_tracked"] == 1 and t["actors_seen"] == 10
    again = RolloutLedger(max_actors=3, clock=clock)
    again.set_state(json.loads(json.dumps(led.get_state())))
    assert again.totals_view() == t and again.actors == led.actors


def test_a_flood_of_untrained_ids_pushes_out_only_its_own_kind():
    """Over the cap, the least recently heard actor never trained on goes first: 10,000
    made-up ids cannot push out an honest actor that went quiet for a moment."""
    clock = _Clock()
    led = RolloutLedger(max_actors=3, clock=clock)
    led.note("honest", "accepted", sent=1, seq=0)
    led.note("slow", "accepted", sent=1, seq=0)
    dropped = []
    for i in range(10_000):
        clock.t += 0.001
        dropped += led.note(f"forged-{i}", "stale", sent=1, seq=0)
    assert list(led.actors) == ["honest", "slow", "forged-9999"]
    assert dropped == [f"forged-{i}" for i in range(9_999)]
    # A forged id that is then trained on is an actor like any other; once every tracked
    # actor has been trained on, the least recently heard goes.
    led.note("forged-9999", "accepted", sent=2, seq=1)
    assert led.note("new", "accepted", sent=1, seq=0) == ["honest"]
    assert list(led.actors) == ["slow", "forged-9999", "new"]
    assert led.note("junk", "stale", sent=1, seq=0) == ["junk"]  # the one never trained on
    again = RolloutLedger(max_actors=2, clock=clock)  # a smaller cap at a restart
    again.set_state(json.loads(json.dumps(led.get_state())))
    assert list(again.actors) == ["forged-9999", "new"]


def test_honest_actors_sent_equals_received_equals_accepted_plus_rejected(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url, actors=2, max_staleness=1)
    sent = {"a": 0, "b": 0}
    for _ in range(4):
        v = loop.run.version
        for actor in ("a", "b"):
            for version in (v - 3, v):  # one stale, one current
                b = _sample(runner, inference, actor, version, sent[actor])
                sent[actor] += 1
                b.sent = sent[actor]
                batches.put(b)
        assert loop.step(WarmStop())
    t = loop.admission.ledger.totals_view()
    _adds_up(t)
    assert t["sent"] == t["received"] == 16 and t["lost_in_flight"] == 0
    assert (
        t["accepted"] == loop.admission.gate.accepted == 8
        and t["stale"] == loop.admission.gate.rejected["stale"]
    )
    assert t["received"] == loop.admission.produced_batches
    for actor in ("a", "b"):
        row = loop.admission.ledger.actors[actor]
        assert row["sent"] == row["received"] == row["accepted"] + row["stale"] == 8
    # The same figures in the status `ppomq status` reads, per actor and in total.
    status = read_status(loop.publisher.redis, "loop")
    assert status["ledger"]["received"] == 16
    assert {a["actor_id"]: (a["sent"], a["accepted"], a["rejected"]) for a in status["actors"]} == {
        "a": (8, 4, 4),
        "b": (8, 4, 4),
    }


def test_a_stalled_loop_publishes_its_rejects_every_second(tmp_path, redis_url):
    """No admissible batch, so no update: the rejects still reach Redis and /metrics."""
    registry = CollectorRegistry()
    loop, batches, runner, inference, redis = _setup(
        tmp_path, redis_url, metrics=LearnerMetrics(registry=registry), actors=1
    )
    future = _sample(runner, inference, "f", loop.run.version + 50, 0)
    for i in range(5):
        batches.put(dataclasses.replace(future, actor_id=f"f{i}", sent=1))
    stop = WarmStop()

    def rejects_published() -> bool:
        raw = redis.get(RunKeys("loop").stats)
        return raw is not None and json.loads(raw)["rejects"] == {"future_version": 5}

    def stop_once_published() -> None:
        with contextlib.suppress(AssertionError):  # the main thread says what went wrong
            wait_until(rejects_published, 30, "the rejects in Redis")
        stop.requested = True

    stopper = threading.Thread(target=stop_once_published)
    stopper.start()
    try:
        assert not loop.step(stop)  # never trained
        # It returned for the stop, asked once the rejects were out: stalled until then.
        assert stop.requested
    finally:
        stop.requested = True
        stopper.join()
    stats = json.loads(redis.get(RunKeys("loop").stats))
    assert stats["version"] == 5 and stats["rejects"] == {"future_version": 5}
    assert stats["ledger"]["received"] == 5 and stats["ledger"]["invalid"] == {"future_version": 5}
    rejected = registry.get_sample_value(
        "ppomq_learner_batches_rejected_total", {"reason": "future_version"}
    )
    assert rejected == 5
    assert registry.get_sample_value("ppomq_learner_ledger_received_total") == 5


def test_10000_actor_ids_leave_the_loops_per_actor_state_within_the_cap(tmp_path, redis_url):
    loop, batches, runner, inference, redis = _setup(
        tmp_path, redis_url, actors=1, max_actors=50, actor_timeout_s=0.5
    )
    stale = _sample(runner, inference, "x", 0, 0)  # loop at version 5, max staleness 2
    honest = 0
    for i in range(10_000):
        batches.put(dataclasses.replace(stale, actor_id=f"forged-{i}", seq=i, sent=1))
        if i % 2500 == 2499:
            batches.put(_sample(runner, inference, "honest", loop.run.version, honest))
            honest += 1
            assert loop.step(WarmStop())
    assert len(loop.admission.actors) <= 50 and len(loop.admission.ledger.actors) <= 50
    assert len(loop.admission.roster._last_heard) <= 50 and len(loop.admission.seqs) <= 50
    assert redis.hlen(RunKeys("loop").actors) <= 50
    t = loop.admission.ledger.totals_view()
    # Rows opened: the honest actor's once; the made-up ids, never trained on, push out
    # only each other (its row counts all 4 of its batches).
    assert t["actors_seen"] == 10_001
    assert t["actors_dropped_over_cap"] == 10_001 - t["actors_tracked"] > 9_900
    assert t["received"] == 10_004 and t["stale"] == 10_000 and t["accepted"] == 4
    assert loop.admission.ledger.actors["honest"]["accepted"] == 4
    ckpt = loop.checkpoint()
    assert ckpt.stat().st_size < 200_000


def test_surplus_batches_have_their_own_column_and_the_ledger_still_adds_up():
    ledger = RolloutLedger()
    for outcome in ("accepted", "surplus", "surplus", "stale", "duplicate", "header_not_msgpack"):
        ledger.note("a", outcome, sent=6, seq=5)
    row = ledger.actors["a"]
    assert row["surplus"] == 2 and ledger.totals["surplus"] == 2
    assert row["invalid"] == {"header_not_msgpack": 1}
    parts = row["accepted"] + row["stale"] + row["duplicates"] + row["surplus"]
    assert row["received"] == parts + sum(row["invalid"].values()) == 6
    assert ledger.rejected(row) == 3  # surplus is not a rejection
    assert ledger.totals_view()["rejected"] == 3
