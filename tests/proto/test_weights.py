"""Weights codec: round trip, zero-copy views, checksum, every rejection reason."""

from __future__ import annotations

import hashlib

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ppomq.proto import (
    DecodeError,
    Reason,
    decode_weights,
    encode_weights,
    pack_weights,
    unpack_tensors,
)
from ppomq.proto.weights_blob import ALIGNMENT, MAX_HEADER_BYTES, parse_weights_header


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "pi.weight": rng.standard_normal((4, 3)).astype(np.float32),
        "pi.bias": rng.standard_normal(4).astype(np.float32),
        "empty": np.zeros((0, 5), np.float32),
        "steps": np.arange(3, dtype=np.int64),
        "mask": np.array([True, False]),
    }


def _frames(**kw) -> list[bytes]:
    header, blob = pack_weights(7, _tensors(), model={"hidden": [64, 64]}, **kw)
    return [bytes(f) for f in encode_weights(header, blob)]


def _reason(frames, **kw) -> Reason | None:
    try:
        decode_weights(frames, **kw)
    except DecodeError as exc:
        return exc.reason
    return None


def test_round_trip_gives_equal_tensors_as_read_only_views_over_the_blob():
    tensors = _tensors()
    header, blob = pack_weights(
        3, tensors, model={"arch": "mlp"}, learner_step=11, env_steps=12, created_ns=5
    )
    h, view = decode_weights(encode_weights(header, blob))
    assert (h.version, h.learner_step, h.env_steps, h.created_ns) == (3, 11, 12, 5)
    assert h.model == {"arch": "mlp"} and h.sha256 == hashlib.sha256(blob).hexdigest()
    out = unpack_tensors(h, view)
    assert list(out) == list(tensors)
    for name, arr in tensors.items():
        np.testing.assert_array_equal(out[name], arr)
        assert out[name].dtype == arr.dtype and not out[name].flags.writeable
        if arr.nbytes:
            assert np.shares_memory(out[name], np.frombuffer(view, np.uint8))
    assert all(t.offset % ALIGNMENT == 0 for t in h.tensors if t.nbytes)


def test_blob_bytes_are_little_endian_whatever_the_input_order():
    _, blob = pack_weights(1, {"w": np.arange(3, dtype=">i4")})
    assert bytes(blob) == np.arange(3, dtype="<i4").tobytes()


def test_pack_refuses_a_dtype_outside_the_wire_set():
    with pytest.raises(ValueError):
        pack_weights(1, {"w": np.zeros(2, np.complex64)})


def test_a_flipped_blob_byte_fails_the_checksum_unless_verification_is_off():
    frames = _frames()
    blob = bytearray(frames[1])
    blob[0] ^= 1
    assert _reason([frames[0], bytes(blob)]) is Reason.CHECKSUM
    assert _reason([frames[0], bytes(blob)], verify=False) is None


def _with_header(change) -> list[bytes]:
    frames = _frames()
    doc = msgpack.unpackb(frames[0])
    change(doc)
    return [msgpack.packb(doc), frames[1]]


def _set(key, value):
    def change(doc):
        doc[key] = value

    return change


def _tensor(i, key, value):
    def change(doc):
        doc["tensors"][i][key] = value

    return change


@pytest.mark.parametrize(
    "frames,reason",
    [
        ([b"x"], Reason.FRAME_COUNT),
        ([b"a", b"b", b"c"], Reason.FRAME_COUNT),
        ([bytes(MAX_HEADER_BYTES + 1), b""], Reason.OVERSIZE),
        ([b"\xc1", b""], Reason.HEADER_NOT_MSGPACK),
        ([msgpack.packb([1, 2]), b""], Reason.HEADER_INVALID),
        (_with_header(_set("schema", "ppomq.rollout/1.0")), Reason.SCHEMA_UNKNOWN),
        (_with_header(_set("schema", 5)), Reason.SCHEMA_UNKNOWN),
        (_with_header(lambda d: d.pop("schema")), Reason.SCHEMA_UNKNOWN),
        (_with_header(_set("schema", "ppomq.weights/2.0")), Reason.SCHEMA_MAJOR),
        (_with_header(_set("version", -1)), Reason.HEADER_INVALID),
        (_with_header(_set("learner_step", True)), Reason.HEADER_INVALID),
        (_with_header(_set("model", [])), Reason.HEADER_INVALID),
        (_with_header(_set("sha256", "AB" * 32)), Reason.HEADER_INVALID),
        (_with_header(_set("tensors", {})), Reason.HEADER_INVALID),
        (_with_header(_tensor(0, "name", 3)), Reason.HEADER_INVALID),
        (_with_header(_tensor(1, "name", "pi.weight")), Reason.DUPLICATE_ARRAY),
        (_with_header(_tensor(0, "dtype", "bfloat16")), Reason.DTYPE_NOT_ALLOWED),
        (_with_header(_tensor(0, "dtype", ["float32"])), Reason.DTYPE_NOT_ALLOWED),
        (_with_header(_tensor(0, "shape", [-4, 3])), Reason.SHAPE_MISMATCH),
        (_with_header(_tensor(0, "shape", [2**62, 2**62])), Reason.SHAPE_MISMATCH),
        (_with_header(_tensor(0, "shape", [4, 4])), Reason.BYTE_COUNT),
        (_with_header(_tensor(1, "offset", 8)), Reason.BYTE_COUNT),
        (_with_header(_tensor(1, "offset", 1 << 20)), Reason.BYTE_COUNT),
        (_with_header(_set("blob_size", 10)), Reason.BYTE_COUNT),
    ],
)
def test_each_bad_weights_message_gets_its_reason(frames, reason):
    assert _reason(frames) is reason


def test_blob_over_the_cap_is_oversize_before_anything_is_hashed():
    assert _reason(_frames(), max_bytes=16) is Reason.OVERSIZE


def test_newer_minor_with_unknown_keys_is_accepted():
    def change(doc):
        doc.update(schema="ppomq.weights/1.9", future={"x": 1})
        doc["tensors"][0]["future"] = True

    frames = _with_header(change)
    assert _reason(frames) is None


def test_parse_weights_header_alone_raises_only_decode_error():
    for raw in (b"", b"\x81\xa1a", msgpack.packb({"schema": "ppomq.weights/1.0", "x": [{}]})):
        with pytest.raises(DecodeError):
            parse_weights_header(raw)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=10),
        hnp.arrays(
            st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_]),
            hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
        ),
        max_size=5,
    )
)
def test_property_round_trip(tensors):
    header, blob = pack_weights(1, tensors)
    h, view = decode_weights(encode_weights(header, blob))
    out = unpack_tensors(h, view)
    for name, arr in tensors.items():
        np.testing.assert_array_equal(out[name], arr)


_ints = st.integers(-(2**63), 2**64 - 1)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_property_nothing_but_decode_error_escapes(data):
    frames = _frames()
    doc = msgpack.unpackb(frames[0])
    value = data.draw(st.none() | _ints | st.text() | st.lists(_ints))
    if data.draw(st.booleans()):
        doc[data.draw(st.sampled_from(sorted(doc)))] = value
    else:
        entry = doc["tensors"][data.draw(st.integers(0, len(doc["tensors"]) - 1))]
        entry[data.draw(st.sampled_from(sorted(entry)))] = value
    blob = data.draw(st.sampled_from([frames[1], frames[1][:-1], b""]))
    try:
        decode_weights([msgpack.packb(doc), blob])
    except DecodeError as exc:
        assert "unreadable" not in exc.detail


def test_a_zero_dimensional_tensor_keeps_its_shape():
    header, blob = pack_weights(1, {"count": np.array(3.0), "v": np.ones(2, np.float32)})
    assert [t.shape for t in header.tensors] == [(), (2,)]
    got = unpack_tensors(header, blob)
    assert got["count"].shape == () and float(got["count"]) == 3.0
