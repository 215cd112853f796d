"""Parked long polls: which ones a newer version, the run's end or their deadline answers."""

from __future__ import annotations

from ppomq.proto import weights_rpc as protocol
from ppomq.weightserver.parking import ParkedRequests


def _request(have: int) -> protocol.Request:
    return protocol.parse_request(protocol.encode_get(have, wait_ms=500))


def _park(parked: ParkedRequests, name: bytes, have: int, deadline: float) -> None:
    parked.park([name], _request(have), deadline)


def test_a_newer_version_takes_out_only_the_requests_it_is_newer_for() -> None:
    parked = ParkedRequests(limit=10)
    _park(parked, b"a", have=3, deadline=10.0)
    _park(parked, b"b", have=5, deadline=10.0)
    assert parked.take_answerable(None, finished=False) == []
    assert [p.envelope for p in parked.take_answerable(4, finished=False)] == [[b"a"]]
    assert len(parked) == 1
    assert [p.envelope for p in parked.take_answerable(6, finished=False)] == [[b"b"]]
    assert len(parked) == 0


def test_the_runs_end_takes_out_every_request_even_with_nothing_held() -> None:
    parked = ParkedRequests(limit=10)
    _park(parked, b"a", have=3, deadline=10.0)
    _park(parked, b"b", have=9, deadline=10.0)
    assert len(parked.take_answerable(None, finished=True)) == 2
    assert len(parked) == 0


def test_deadlines_expire_in_order_and_bound_the_wait() -> None:
    parked = ParkedRequests(limit=10)
    assert parked.seconds_to_soonest(0.0) is None
    _park(parked, b"late", have=0, deadline=5.0)
    _park(parked, b"early", have=0, deadline=2.0)
    assert parked.seconds_to_soonest(1.0) == 1.0
    assert parked.seconds_to_soonest(3.0) == 0.0
    assert [p.envelope for p in parked.take_expired(3.0)] == [[b"early"]]
    assert [p.envelope for p in parked.take_all()] == [[b"late"]]


def test_room_runs_out_at_the_limit() -> None:
    parked = ParkedRequests(limit=1)
    assert parked.has_room
    _park(parked, b"a", have=0, deadline=1.0)
    assert not parked.has_room
