"""Grants: what each actor may sample with a version, and the book that holds batches to it."""

from __future__ import annotations

from ppomq.learner.grants import (
    GrantBook,
    Grants,
    batches_needed,
    fixed_grants,
    per_actor_grants,
)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _book(clock: Clock | None = None, max_actors: int = 100) -> GrantBook:
    return GrantBook(timeout_s=3.0, max_actors=max_actors, clock=clock or Clock())


def test_the_per_actor_rule_grants_every_actor_its_share_known_or_not():
    grants = per_actor_grants(2)
    assert grants.of("anyone") == 2 and grants.header() == {"actors": {}, "others": 2}


def test_an_update_takes_whole_batches():
    assert batches_needed(512, 256) == 2 and batches_needed(513, 256) == 3
    assert batches_needed(100, 256) == 1


def test_fixed_grants_go_one_each_to_the_least_recently_granted_idle_actors():
    grants = fixed_grants(known=["old", "mid", "new"], pending={"mid": 1}, wanted=2, cap=4)
    # "mid" still owes a batch: the others are granted first, one each.
    assert grants.actors == {"old": 1, "mid": 0, "new": 1}
    assert grants.others == 0  # the known actors fill the update: newcomers say hello


def test_fixed_grants_give_idle_actors_more_than_one_only_when_they_are_few():
    grants = fixed_grants(known=["a", "b"], pending={}, wanted=5, cap=2)
    assert grants.actors == {"a": 2, "b": 2}
    # Known actors cannot fill the update: an actor not known may send one.
    assert grants.others == 1
    assert fixed_grants(known=[], pending={}, wanted=2, cap=2).others == 1
    nothing = fixed_grants(known=["a"], pending={}, wanted=-3, cap=2)
    assert nothing.actors == {"a": 0} and nothing.others == 0


def test_a_batch_beyond_its_grant_is_refused_and_a_starving_learner_takes_one_more():
    book = _book()
    book.set(5, Grants({"a": 1}, 0))
    assert book.take("a", 5)
    assert not book.take("a", 5)  # a resend whose original arrived
    assert not book.take("b", 5)  # not granted: it should have said hello
    book.open(5)  # nothing has come for a while: the batches granted may be lost
    assert book.take("a", 5) and book.take("b", 5)
    assert not book.take("a", 5)  # one more each, not any number
    book.set(6, Grants({"a": 1, "b": 0}, 0))  # a new version closes it
    assert not book.take("b", 6)


def test_a_version_with_no_grants_on_record_holds_no_batch_back():
    book = _book()
    assert all(book.take("a", 3) for _ in range(3))  # from before this learner started
    book.set(4, Grants({}, 1))
    book.forget_below(5)
    assert book.of("a", 4) is None and book.take("a", 4)


def test_plan_inputs_owe_at_most_one_batch_and_drop_actors_gone_quiet():
    clock = Clock()
    book = _book(clock)
    book.hello("a")
    book.hello("b")
    book.set(1, Grants({"a": 3, "b": 0}, 0))
    known, pending = book.plan_inputs()
    # "b" was granted least recently (never): first in line; "a" owes what it samples.
    assert known == ["b", "a"] and pending == {"a": 1}
    assert book.take("a", 1)
    clock.t = 2.0
    book.hello("b")
    clock.t = 4.0  # "a" silent for 4 s > 3 s: gone, its grant given to others
    known, pending = book.plan_inputs()
    assert known == ["b"] and pending == {}


def test_the_book_keeps_at_most_max_actors_and_made_up_refused_ids_evict_nobody():
    clock = Clock()
    book = _book(clock, max_actors=2)
    book.hello("a")
    clock.t = 1.0
    book.hello("b")
    book.set(1, Grants({"a": 0, "b": 0}, 0))
    for i in range(50):  # refused batches under made-up ids: the book is full
        assert not book.take(f"forged-{i}", 1)
    assert sorted(book.plan_inputs()[0]) == ["a", "b"]
    clock.t = 2.0
    book.hello("c")  # a hello makes room: the actor heard least recently goes
    assert sorted(book.plan_inputs()[0]) == ["b", "c"]


def test_an_actor_that_sends_beyond_its_grant_is_not_waited_for_until_it_stops():
    clock = Clock()
    book = _book(clock)
    book.set(5, per_actor_grants(1))
    assert book.may("flooder", 5) and book.take("flooder", 5)
    assert book.may("honest", 5) and book.take("honest", 5)
    assert book.overdrawn() == set()  # within their grants
    assert not book.may("flooder", 5)  # its second batch with version 5
    assert book.overdrawn() == {"flooder"}
    clock.t += 3.0  # timeout_s: still overdrawn
    assert book.overdrawn() == {"flooder"}
    clock.t += 0.1  # nothing beyond its grant for longer than timeout_s
    assert book.overdrawn() == set()
