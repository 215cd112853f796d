"""ROLLOUT 1.1's optional `sent` (the rollout ledger's count of what an actor sent)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.proto import DecodeError, Reason, decode, encode, peek_sender


def _header(frames: list) -> dict:
    return msgpack.unpackb(frames[0])


def _with_header(frames: list, **changes) -> list:
    h = _header(frames)
    for key, value in changes.items():
        if value is None:
            h.pop(key, None)
        else:
            h[key] = value
    return [msgpack.packb(h, use_bin_type=True), *frames[1:]]


def test_sent_round_trips_and_is_left_out_when_unset():
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(0), seq=4)
    batch.sent = 5
    frames = encode(batch)
    assert _header(frames)["sent"] == 5 and _header(frames)["schema"] == "ppomq.rollout/1.4"
    assert decode(frames, spec).sent == 5
    batch.sent = None
    assert "sent" not in _header(encode(batch)) and decode(encode(batch), spec).sent is None


def test_a_1_0_message_without_sent_still_decodes():
    spec = make_spec()
    frames = encode(make_batch(spec, np.random.default_rng(1)))
    old = _with_header(frames, schema="ppomq.rollout/1.0", sent=None)
    got = decode(old, spec)
    assert got.sent is None and got.actor_id == "actor-0"


@pytest.mark.parametrize("sent", [0, -1, 1.0, True, "3", [1]])
def test_a_sent_that_is_not_an_int_of_at_least_1_is_header_invalid(sent):
    spec = make_spec()
    frames = _with_header(encode(make_batch(spec, np.random.default_rng(2))), sent=sent)
    with pytest.raises(DecodeError) as err:
        decode(frames, spec)
    assert err.value.reason is Reason.HEADER_INVALID


def test_peek_sender_names_the_claimed_sender_of_a_refused_message():
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(3), actor_id="who")
    batch.sent = 9
    frames = _with_header(encode(batch), run_id="other")
    assert peek_sender(frames) == "who"  # its `sent` (9) is not taken from a refused message
    assert peek_sender(_with_header(frames, sent="x")) == "who"
    assert peek_sender([b"\xc1", b""]) is None  # not msgpack
    assert peek_sender(_with_header(frames, actor_id=7)) is None
