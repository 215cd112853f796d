"""Which side binds, from the learner's wait for rollouts and the actors' wait for weights."""

from __future__ import annotations

import pytest

from ppomq.reports.bottleneck import BUSY, HELD, STARVED, bottleneck, status_bottleneck


def test_a_starved_learner_asks_for_more_actors():
    b = bottleneck(0.9, 0.05)
    assert b.side == "actors"
    assert b.line == (
        "actor-bound: the learner waits 90% of its time for rollouts (actors wait 5% of "
        "theirs for weights); more actor replicas pay (--actors N; compose: --scale "
        "actor=N; Kubernetes: the actor HPA)"
    )
    assert b.short == "actor-bound: learner waits 90%"


def test_actors_waiting_for_weights_say_more_replicas_will_not_help():
    b = bottleneck(0.03, 0.82)
    assert b.side == "learner"
    assert b.line.startswith("learner-bound: actors wait 82% of theirs for weights")
    assert "more actor replicas will not help" in b.line and "--torch-threads" in b.line
    assert b.short == "learner-bound: actors wait 82%"


@pytest.mark.parametrize(
    ("learner", "actors", "side"),
    [
        (STARVED, HELD - 0.01, "actors"),  # the thresholds are inclusive
        (STARVED - 0.01, HELD, "learner"),
        (STARVED, HELD, "handoff"),
        (0.3, 0.2, "balanced"),
        (0.7, None, "actors"),  # actors of an older release send no share
        (BUSY, None, "learner"),
        (0.3, None, "unknown"),
        (None, 0.9, "learner"),  # before the learner's second update
        (None, 0.2, "unknown"),
        (None, None, "unknown"),
    ],
)
def test_thresholds_decide_the_side(learner, actors, side):
    assert bottleneck(learner, actors).side == side


def test_only_a_known_side_has_a_short_form_for_the_progress_line():
    assert bottleneck(None, None).short == ""
    assert bottleneck(0.3, None).short == ""
    assert bottleneck(0.6, 0.6).short == "hand-offs bind: learner waits 60%, actors 60%"


def test_a_status_of_an_older_learner_has_no_side():
    assert status_bottleneck({"version": 3}).side == "unknown"
    assert status_bottleneck({"learner_wait_fraction": 0.95}).side == "actors"
