"""ROLLOUT 1.4's optional `weights_wait` (the actor's share of time waiting for weights)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.proto import DecodeError, Reason, decode, encode


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


def test_weights_wait_round_trips_and_is_left_out_when_unset():
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(0), seq=4)
    batch.weights_wait = 0.823
    frames = encode(batch)
    assert _header(frames)["weights_wait"] == 0.823
    assert decode(frames, spec).weights_wait == 0.823
    batch.weights_wait = None
    frames = encode(batch)
    assert "weights_wait" not in _header(frames) and decode(frames, spec).weights_wait is None


def test_a_1_3_message_without_it_still_decodes():
    spec = make_spec()
    frames = encode(make_batch(spec, np.random.default_rng(1)))
    got = decode(_with_header(frames, schema="ppomq.rollout/1.3"), spec)
    assert got.weights_wait is None and got.actor_id == "actor-0"


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), 1, True, "0.5", [0.5]])
def test_a_weights_wait_that_is_not_a_float_in_0_1_is_header_invalid(share):
    spec = make_spec()
    frames = _with_header(encode(make_batch(spec, np.random.default_rng(2))), weights_wait=share)
    with pytest.raises(DecodeError) as err:
        decode(frames, spec)
    assert err.value.reason is Reason.HEADER_INVALID
