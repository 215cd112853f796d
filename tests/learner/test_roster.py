"""ActorRoster: whom an update waits for, on a clock the test moves."""

from __future__ import annotations

from ppomq.learner.roster import JOIN_COOLDOWN_TIMEOUTS, ActorRoster, ReceivingClock


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _roster(hint: int = 3, timeout_s: float = 2.0) -> tuple[ActorRoster, Clock]:
    clock = Clock()
    return ActorRoster(timeout_s=timeout_s, hint=hint, clock=clock), clock


def test_before_anyone_is_heard_from_an_update_waits_for_the_hint():
    roster, _ = _roster(hint=3)
    assert roster.expected() == 3
    assert not roster.quorum(set())


def test_during_discovery_the_hint_holds_then_only_live_actors_count():
    roster, clock = _roster(hint=3, timeout_s=2.0)
    roster.heard("a")
    assert roster.expected() == 3  # a second ago the others may just be starting
    assert not roster.quorum({"a"})
    clock.now += 1.5
    roster.heard("a")
    clock.now += 1.0  # discovery over; only "a" ever showed up
    assert roster.expected() == 1
    assert roster.quorum({"a"})


def test_an_actor_silent_past_the_timeout_is_no_longer_waited_for_and_rejoins():
    roster, clock = _roster(hint=1, timeout_s=2.0)
    for actor in ("a", "b", "c"):
        roster.heard(actor)
    clock.now += 3.0
    roster.heard("a")  # b and c went away
    assert roster.live() == {"a"}
    assert roster.expected() == 1
    assert roster.quorum({"a"})
    roster.heard("b")  # b is back
    assert roster.expected() == 2
    assert not roster.quorum({"a"})
    assert roster.quorum({"a", "b"})


def test_a_new_actor_joins_the_quorum_with_its_first_batch():
    roster, clock = _roster(hint=1, timeout_s=2.0)
    roster.heard("a")
    clock.now += 5.0
    roster.heard("a")
    roster.heard("new")
    assert roster.live() == {"a", "new"}
    assert not roster.quorum({"a"})


def test_forget_drops_long_gone_actors_only():
    roster, clock = _roster(hint=1, timeout_s=2.0)
    roster.heard("old")
    clock.now += 100.0
    roster.heard("young")
    assert roster.forget(older_than_s=50.0) == ["old"]
    assert roster.live() == {"young"}


def test_a_newcomer_that_just_missed_is_waited_for_only_in_a_vacancy_below_the_hint():
    # One actor of the hinted two is gone: its replacement's first batch just missed an
    # update, and the next quorum waits for its next batch.
    roster, clock = _roster(hint=2, timeout_s=2.0)
    roster.heard("a")
    roster.heard("b")
    clock.now += 3.0
    roster.heard("a")  # b is gone
    assert roster.joining("b-replacement")
    assert roster.live() == {"a", "b-replacement"}
    assert not roster.quorum({"a"})
    assert not roster.joining("made-up")  # the one vacancy is taken
    roster.heard("b-replacement")  # its next batch was trained on: a member
    assert roster.quorum({"a", "b-replacement"})
    assert not roster.joining("made-up-2")  # no vacancy: two members live
    assert roster.live() == {"a", "b-replacement"}


def test_made_up_ids_never_join_a_roster_that_has_its_hinted_actors():
    roster, _ = _roster(hint=1, timeout_s=600.0)
    roster.heard("honest")
    assert not any(roster.joining(f"made-up-{i}") for i in range(2000))
    assert roster.live() == {"honest"} and roster.quorum({"honest"})


def test_a_newcomer_that_never_sends_again_is_waited_for_once_then_closes_the_door():
    roster, clock = _roster(hint=2, timeout_s=2.0)
    roster.heard("a")
    clock.now += 3.0  # past the discovery window; the hint's second actor never came
    roster.heard("a")
    assert roster.joining("made-up-1")
    clock.now += 2.5  # it never sent again
    roster.heard("a")
    assert roster.live() == {"a"} and roster.quorum({"a"})
    assert not roster.joining("made-up-1")  # each id once
    assert not roster.joining("made-up-2")  # and for a while, no newcomer at all
    clock.now += JOIN_COOLDOWN_TIMEOUTS * 2.0
    roster.heard("a")
    assert roster.joining("new")  # an honest replacement, later
    roster.drop("new")
    assert roster.live() == {"a"}


def test_on_the_receiving_clock_the_learners_busy_time_is_no_silence():
    base = Clock()
    receiving = ReceivingClock(base)
    roster = ActorRoster(timeout_s=2.0, hint=1, clock=receiving)
    roster.heard("a")
    with receiving.busy():  # a 10 s update: the learner was not listening
        base.now += 10.0
        assert roster.live() == {"a"}
    assert roster.live() == {"a"}
    base.now += 2.5  # 2.5 s of waiting with nothing from a: that is silence
    assert roster.live() == set()


def test_an_actor_waiting_for_the_next_version_is_not_silent_until_it_is_out():
    roster, clock = _roster(hint=2, timeout_s=2.0)
    roster.heard("a")
    roster.heard("b")
    roster.waiting("a")  # a sent all it may for this version; b owes a batch
    clock.now += 3.0
    assert roster.live() == {"a"}  # b is silent, a is waiting for the learner
    roster.new_version()  # a owes a batch again from now
    clock.now += 1.5
    assert roster.live() == {"a"}
    clock.now += 1.0
    assert roster.live() == set()
