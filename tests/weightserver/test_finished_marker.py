"""Which reads of the run's `finished` marker end the run a weightserver serves."""

from __future__ import annotations

from ppomq.weightserver.finished_marker import FinishedMarker, MarkerSeen


def test_a_marker_that_appears_while_serving_ends_the_run_once() -> None:
    marker = FinishedMarker()
    assert marker.observe(None) is MarkerSeen.NOTHING_NEW
    assert marker.observe(b'{"version": 7}') is MarkerSeen.RUN_ENDED
    assert marker.ended
    assert marker.observe(b'{"version": 7}') is MarkerSeen.NOTHING_NEW


def test_a_marker_there_at_start_belongs_to_an_earlier_run_until_it_changes() -> None:
    marker = FinishedMarker()
    assert marker.observe(b"old") is MarkerSeen.EARLIER_RUN
    assert marker.observe(b"old") is MarkerSeen.NOTHING_NEW
    assert not marker.ended
    assert marker.observe(b"new") is MarkerSeen.RUN_ENDED


def test_once_the_earlier_marker_is_cleared_even_the_same_text_ends_the_new_run() -> None:
    marker = FinishedMarker()
    marker.observe(b"same")
    assert marker.observe(None) is MarkerSeen.NOTHING_NEW
    assert marker.observe(b"same") is MarkerSeen.RUN_ENDED
