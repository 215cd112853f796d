"""At a run's end: which clients must be told before the weightserver exits."""

from __future__ import annotations

from ppomq.weightserver.run_end import CLIENT_ACTIVE_S, FINISH_GRACE_S, RunEndRollCall

END = 1000.0


def test_the_server_may_exit_once_every_recently_active_client_was_told() -> None:
    roll = RunEndRollCall(limit=10)
    roll.asked(b"quiet", END - CLIENT_ACTIVE_S - 1)
    roll.asked(b"a", END - 1)
    roll.asked(b"b", END - 2)
    assert roll.untold(END) == {b"a", b"b"}
    roll.told(b"a", END)
    assert not roll.everyone_told(END, END + 1)
    roll.told(b"b", END)
    assert roll.everyone_told(END, END + 1)


def test_the_grace_ends_the_wait_for_a_client_that_never_asks_again() -> None:
    roll = RunEndRollCall(limit=10)
    roll.asked(b"gone", END - 1)
    assert not roll.everyone_told(END, END + FINISH_GRACE_S - 0.5)
    assert roll.everyone_told(END, END + FINISH_GRACE_S)


def test_a_client_first_seen_after_the_end_is_not_waited_for() -> None:
    roll = RunEndRollCall(limit=10)
    roll.asked(b"a", END - 1)
    assert roll.untold(END) == {b"a"}
    roll.asked(b"late", END + 1)
    assert roll.untold(END) == {b"a"}


def test_past_the_limit_the_longest_quiet_client_is_forgotten() -> None:
    roll = RunEndRollCall(limit=2)
    roll.asked(b"first", END - 3)
    roll.asked(b"second", END - 2)
    roll.asked(b"third", END - 1)
    assert roll.untold(END) == {b"second", b"third"}
