"""The learner's recent share of time waiting for rollouts, from its phase totals."""

from __future__ import annotations

from ppomq.learner.wait_share import WaitShare


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _after_updates(share: WaitShare, clock: Clock, updates: list[tuple[float, float]]):
    """Each update: (wait, busy) seconds; the status is written once after it."""
    totals = {"wait": 0.0, "sgd": 0.0}
    got = []
    for wait, busy in updates:
        clock.t += wait + busy
        totals["wait"] += wait
        totals["sgd"] += busy
        got.append(share.observe(dict(totals)))
    return got


def test_the_first_update_is_start_up_and_left_out():
    clock = Clock()
    share = WaitShare(window_s=30.0, clock=clock)
    assert share.observe({"wait": 0.0, "sgd": 0.0}) is None  # the learner's first write
    got = _after_updates(share, clock, [(20.0, 1.0), (1.0, 3.0), (1.0, 3.0)])
    assert got == [None, 0.25, 0.25]


def test_the_share_follows_the_last_window_not_the_whole_run():
    clock = Clock()
    share = WaitShare(window_s=30.0, clock=clock)
    share.observe({"wait": 0.0, "sgd": 0.0})
    # Starved for a while (9 s of 10 waiting), then more actors: it hardly waits.
    got = _after_updates(share, clock, [(9.0, 1.0)] * 10 + [(0.1, 1.9)] * 30)
    assert got[9] == 0.9
    assert got[-1] == 0.05


def test_a_learner_with_no_update_for_long_keeps_its_last_updates_share():
    clock = Clock()
    share = WaitShare(window_s=30.0, clock=clock)
    share.observe({"wait": 0.0, "sgd": 0.0})
    _after_updates(share, clock, [(1.0, 1.0), (60.0, 20.0)])
    clock.t += 300.0
    assert share.observe({"wait": 61.0, "sgd": 21.0}) == 0.75


def test_a_resumed_learners_earlier_totals_are_not_counted():
    clock = Clock()
    share = WaitShare(window_s=30.0, clock=clock)
    assert share.observe({"wait": 500.0, "sgd": 10.0}) is None
    clock.t += 2.0
    assert share.observe({"wait": 501.0, "sgd": 11.0}) is None  # its first update
    clock.t += 2.0
    assert share.observe({"wait": 501.5, "sgd": 12.5}) == 0.25
