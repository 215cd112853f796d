"""Rollout codec: round trips, zero copy, every rejection reason, and the check order."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.messages.badmsgs import MUTATIONS, Generator, HypothesisSource, RngSource
from benchmarks.messages.factory import make_batch, make_spec, wire
from ppomq.proto import ActionSpace, DecodeError, EpisodeStats, Reason, SeqTracker, decode, encode

# Not decode's: the staleness gate's, the weights', the key check's, the episode book's.
ROLLOUT_REASONS = set(Reason) - {
    Reason.STALE,
    Reason.CHECKSUM,
    Reason.ACTOR_ID_NOT_KEY,
    Reason.EPISODES_MISMATCH,
}


def _assert_same(batch, out) -> None:
    assert list(out.arrays) == list(batch.arrays)
    for name, arr in batch.arrays.items():
        assert out.arrays[name].dtype == arr.dtype.newbyteorder("<"), name
        np.testing.assert_array_equal(out.arrays[name], arr, err_msg=name)
    for key in ("run_id", "actor_id", "seq", "policy_version", "env_id", "created_ns"):
        assert getattr(out, key) == getattr(batch, key)
    assert out.episodes == batch.episodes


@pytest.mark.parametrize(
    "kind,recurrent,bootstrap_obs,obs_dtype",
    [
        ("discrete", False, False, "float32"),
        ("discrete", False, True, "uint8"),
        ("continuous", False, False, "float64"),
        ("continuous", True, True, "float16"),
        ("discrete", True, False, "int16"),
    ],
)
def test_round_trip_keeps_every_array_and_field(kind, recurrent, bootstrap_obs, obs_dtype):
    spec = make_spec(kind, recurrent=recurrent, obs_dtype=obs_dtype, obs_shape=(2, 3))
    batch = make_batch(spec, np.random.default_rng(1), seq=5, bootstrap_obs=bootstrap_obs)
    out = decode(wire(batch), spec)
    _assert_same(batch, out)
    assert out.nbytes == sum(map(len, wire(batch)))


def test_decode_returns_views_over_the_received_frames_not_copies():
    spec = make_spec()
    frames = wire(make_batch(spec, np.random.default_rng(2)))
    out = decode(frames, spec)
    for i, name in enumerate(out.arrays, start=1):
        assert np.shares_memory(out.arrays[name], np.frombuffer(frames[i], np.uint8)), name


def test_encode_sends_the_callers_arrays_without_copying():
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(3))
    frames = encode(batch)
    for frame, arr in zip(frames[1:], batch.arrays.values(), strict=True):
        assert frame is arr


def test_encode_converts_big_endian_and_strided_arrays_to_the_wire_layout():
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(4))
    batch.arrays["logp"] = batch.arrays["logp"].astype(">f4")
    batch.arrays["values"] = np.asfortranarray(batch.arrays["values"])
    expected = {k: np.array(v) for k, v in batch.arrays.items()}
    out = decode(wire(batch), spec)
    for name, arr in expected.items():
        np.testing.assert_array_equal(out.arrays[name], arr)


def test_encode_refuses_a_dtype_the_wire_does_not_carry():
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(5))
    batch.arrays["obs"] = batch.arrays["obs"].astype(np.complex64)
    with pytest.raises(ValueError, match="not a wire dtype"):
        encode(batch)


def test_encode_accepts_numpy_scalars_in_header_and_episodes():
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(6))
    batch.seq = np.int64(9)
    batch.episodes = EpisodeStats([np.float32(1.5)], [np.int64(7)])
    out = decode(wire(batch), spec)
    assert out.seq == 9 and out.episodes == EpisodeStats([1.5], [7])


def test_large_finite_floats_are_accepted_and_nan_is_not():
    # The finiteness test is a dot product; 1e30**2 overflows it, which must not count.
    spec = make_spec()
    batch = make_batch(spec, np.random.default_rng(7))
    batch.arrays["rewards"][:] = 3e38
    assert decode(wire(batch), spec).arrays["rewards"][0, 0] == np.float32(3e38)
    batch.arrays["rewards"][1, 1] = np.nan
    with pytest.raises(DecodeError) as err:
        decode(wire(batch), spec)
    assert err.value.reason is Reason.NON_FINITE


def test_empty_observation_arrays_round_trip():
    spec = make_spec(obs_shape=(0,))
    batch = make_batch(spec, np.random.default_rng(8))
    _assert_same(batch, decode(wire(batch), spec))


def accept(frames, spec, seqs):
    """What the learner does with a batch it trains on: decode, then record its seq."""
    batch = decode(frames, spec, seqs)
    seqs.record(batch.actor_id, batch.seq)
    return batch


def test_seq_must_rise_per_actor_and_rejected_batches_are_not_recorded():
    spec = make_spec()
    rng = np.random.default_rng(9)
    seqs = SeqTracker()
    accept(wire(make_batch(spec, rng, seq=3)), spec, seqs)
    accept(wire(make_batch(spec, rng, seq=1, actor_id="other")), spec, seqs)
    bad = make_batch(spec, rng, seq=10)
    bad.arrays["values"][0, 0] = np.inf
    with pytest.raises(DecodeError):
        decode(wire(bad), spec, seqs)
    accept(wire(make_batch(spec, rng, seq=4)), spec, seqs)  # 10 was never recorded
    for seq in (4, 2):
        with pytest.raises(DecodeError) as err:
            decode(wire(make_batch(spec, rng, seq=seq)), spec, seqs)
        assert err.value.reason is Reason.SEQ_NOT_INCREASING


def test_decode_checks_seq_but_never_records_it():
    """Valid at the door is not accepted: the learner may still refuse the batch (stale),
    and a refused batch must leave its actor's seq as it was."""
    spec = make_spec()
    rng = np.random.default_rng(10)
    seqs = SeqTracker()
    accept(wire(make_batch(spec, rng, seq=3)), spec, seqs)
    decode(wire(make_batch(spec, rng, seq=2**63 - 1)), spec, seqs)  # valid, never accepted
    assert decode(wire(make_batch(spec, rng, seq=4)), spec, seqs).seq == 4
    assert len(seqs) == 1


def test_seq_tracker_forgets_the_least_recent_actor_beyond_its_bound():
    seqs = SeqTracker(max_actors=2)
    for actor in ("a", "b", "c"):
        seqs.record(actor, 5)
    assert len(seqs) == 2
    seqs.check("a", 1)  # forgotten: accepted again
    with pytest.raises(DecodeError):
        seqs.check("c", 5)


def test_a_cached_array_table_does_not_let_float_or_bool_dims_through():
    # The fast path compares the table with ==, under which 4.0 == 4 and True == 1.
    spec = make_spec(obs_shape=(1,))
    rng = np.random.default_rng(10)
    decode(wire(make_batch(spec, rng)), spec)  # warm the cache
    for fake in (4.0, True):
        frames = wire(make_batch(spec, rng))
        h = msgpack.unpackb(frames[0])
        h["arrays"][0]["shape"] = [4, 2, fake] if fake is not True else [4, 2, True]
        frames[0] = msgpack.packb(h)
        with pytest.raises(DecodeError) as err:
            decode(frames, spec)
        assert err.value.reason is Reason.SHAPE_MISMATCH


def test_first_failing_check_in_spec_order_decides_the_reason():
    spec = make_spec()
    frames = wire(make_batch(spec, np.random.default_rng(11)))
    h = msgpack.unpackb(frames[0])
    h["run_id"] = "someone-else"  # step 4
    h["arrays"][2]["dtype"] = "complex64"  # step 5
    bad = [msgpack.packb(h), *frames[1:-1], frames[-1] + b"x"]
    with pytest.raises(DecodeError) as err:
        decode(bad, spec)
    assert err.value.reason is Reason.RUN_ID
    h["run_id"] = spec.run_id
    with pytest.raises(DecodeError) as err:
        decode([msgpack.packb(h), *bad[1:]], spec)
    assert err.value.reason is Reason.DTYPE_NOT_ALLOWED


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_crafted_message_gets_its_reason(mutation):
    spec = make_spec()
    gen = Generator(spec, np.random.default_rng(12))
    seqs = SeqTracker()
    accept(gen.base()[0], spec, seqs)  # one accepted batch so that seq cases have a past
    gen.last_good = gen.seq
    src = RngSource(np.random.default_rng(hash(mutation) % 2**32))
    for _ in range(60):
        frames, reason = MUTATIONS[mutation](gen, src)
        try:
            accept(frames, spec, seqs)
            got = None
        except DecodeError as exc:
            got = exc.reason
        assert got is reason, (mutation, frames[0][:200])
        if reason is None:
            gen.last_good = msgpack.unpackb(frames[0])["seq"]


def test_every_rollout_reason_is_reachable_by_a_crafted_message():
    spec = make_spec()
    gen = Generator(spec, np.random.default_rng(13))
    src = RngSource(np.random.default_rng(14))
    seqs = SeqTracker()
    seen: Counter[Reason] = Counter()
    for _ in range(3000):
        frames, reason, _ = gen.make(src)
        try:
            accept(frames, spec, seqs)
        except DecodeError as exc:
            assert exc.reason is reason
            seen[exc.reason] += 1
        else:
            assert reason is None
    assert set(seen) == ROLLOUT_REASONS


def test_a_message_without_frames_is_a_frame_count_error():
    with pytest.raises(DecodeError) as err:
        decode([], make_spec())
    assert err.value.reason is Reason.FRAME_COUNT


def test_reason_codes_are_unique_and_stable():
    codes = [r.code for r in Reason]
    assert len(set(codes)) == len(codes)
    assert Reason.FRAME_COUNT.code == 1 and Reason.INVALID_VALUE.code == 22


# ------------------------------------------------------------------ property tests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_property_catalogue_messages_get_their_expected_reason(data):
    spec = make_spec()
    gen = Generator(spec, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))))
    seqs = SeqTracker()
    accept(gen.base()[0], spec, seqs)
    gen.last_good = gen.seq
    frames, reason, name = gen.make(HypothesisSource(data))
    try:
        decode(frames, spec, seqs)
        got = None
    except DecodeError as exc:
        got = exc.reason
    assert got is reason, name


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["discrete", "continuous"]),
    t=st.integers(1, 9),
    n=st.integers(1, 5),
    obs_shape=st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    obs_dtype=st.sampled_from(["float32", "float16", "float64", "uint8", "int8", "bool"]),
    recurrent=st.booleans(),
    bootstrap_obs=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_round_trip(kind, t, n, obs_shape, obs_dtype, recurrent, bootstrap_obs, seed):
    spec = make_spec(kind, t=t, n=n, obs_shape=obs_shape, obs_dtype=obs_dtype, recurrent=recurrent)
    batch = make_batch(spec, np.random.default_rng(seed), bootstrap_obs=bootstrap_obs)
    _assert_same(batch, decode(wire(batch), spec))


_msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_property_nothing_but_decode_error_escapes(data):
    spec = make_spec()
    frames = wire(make_batch(spec, np.random.default_rng(0)))
    h = msgpack.unpackb(frames[0])
    how = data.draw(st.sampled_from(["frames", "header_value", "table_value", "entry_value"]))
    if how == "frames":
        frames = data.draw(st.lists(st.binary(max_size=64), max_size=12))
    else:
        value = data.draw(_msgpack_values)
        if how == "header_value":
            h[data.draw(st.sampled_from([*h, "extra"]))] = value
        elif how == "table_value":
            h["arrays"][data.draw(st.integers(0, len(h["arrays"]) - 1))] = value
        else:
            entry = h["arrays"][data.draw(st.integers(0, len(h["arrays"]) - 1))]
            entry[data.draw(st.sampled_from(["name", "dtype", "shape", "other"]))] = value
        frames[0] = msgpack.packb(h)
    try:
        decode(frames, spec, SeqTracker())
    except DecodeError as exc:
        assert exc.reason in ROLLOUT_REASONS
        assert exc.reason is not Reason.HEADER_INVALID or "malformed" not in exc.detail


def test_nan_payload_variants_all_count_as_non_finite():
    spec = make_spec(kind="continuous")
    rng = np.random.default_rng(15)
    for bits in (0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7F800000, 0xFF800000):
        batch = make_batch(spec, rng)
        batch.arrays["actions"].view(np.uint32)[1, 1, 0] = bits
        with pytest.raises(DecodeError) as err:
            decode(wire(batch), spec)
        assert err.value.reason is Reason.NON_FINITE
        assert not math.isfinite(float(batch.arrays["actions"][1, 1, 0]))


def _box_spec(low: tuple[float, ...], high: tuple[float, ...]):
    spec = make_spec(kind="continuous")
    action = ActionSpace("continuous", shape=(2,), low=low, high=high, enforce_bounds=True)
    return dataclasses.replace(spec, action=action)


@pytest.mark.parametrize(
    "element,value,accepted",
    [
        (0, 0.9, True),
        (0, 1.5, False),  # above element 0's high (1.0), though inside element 1's
        (1, 1.5, True),  # element 1 has high 2.0
        (1, 2.5, False),
        (1, -1e30, True),  # element 1 is unbounded below
        (0, -1.0, True),  # a bound itself is inside
    ],
)
def test_enforced_box_checks_each_action_element_against_its_own_bounds(element, value, accepted):
    spec = _box_spec(low=(-1.0, -math.inf), high=(1.0, 2.0))
    batch = make_batch(spec, np.random.default_rng(16))
    batch.arrays["actions"] = np.zeros((spec.num_steps, 2, 2), np.float32)
    batch.arrays["actions"][2, 1, element] = value
    if accepted:
        decode(wire(batch), spec)
        return
    with pytest.raises(DecodeError) as err:
        decode(wire(batch), spec)
    assert err.value.reason is Reason.ACTION_OUT_OF_SPACE
    assert f"element {element}" in err.value.detail


def test_unbounded_box_accepts_any_finite_action():
    spec = _box_spec(low=(-math.inf, -math.inf), high=(math.inf, math.inf))
    batch = make_batch(spec, np.random.default_rng(17))
    batch.arrays["actions"][:] = np.float32(3e38)
    decode(wire(batch), spec)


def test_box_bounds_are_one_per_element_in_c_order():
    low = np.array([[-1.0, -2.0, -np.inf], [-4.0, -5.0, -6.0]], np.float32)
    space = ActionSpace.box((2, 3), low, 7.0)
    assert space.low == (-1.0, -2.0, -math.inf, -4.0, -5.0, -6.0)
    assert space.high == (7.0,) * 6
    got_low, got_high = space.bounds()
    np.testing.assert_array_equal(got_low, low)
    assert got_high.shape == (2, 3)
    assert ActionSpace.box((2,), None, None).bounds()[0].tolist() == [-math.inf, -math.inf]


@pytest.mark.parametrize(
    "low,high,error",
    [
        (-1.0, None, TypeError),  # a scalar: ActionSpace.box broadcasts it, the type does not
        ((-1.0,), None, ValueError),  # one bound for two elements
        ((math.nan, 0.0), None, ValueError),
        ((0.0, 1.0), (1.0, 0.5), ValueError),  # low > high in element 1
    ],
)
def test_action_space_refuses_bounds_that_do_not_fit_its_shape(low, high, error):
    with pytest.raises(error, match="ActionSpace"):
        ActionSpace("continuous", shape=(2,), low=low, high=high)


def test_hidden_state_is_required_by_a_recurrent_spec_and_refused_by_any_other():
    """ROLLOUT.md "Recurrent state": a recurrent learner needs each env's step-0 state; a
    learner of a feed-forward policy does not read one and must not silently drop it."""
    rng = np.random.default_rng(9)
    recurrent, plain = make_spec(recurrent=True), make_spec()
    with_state = make_batch(recurrent, rng)
    without = dataclasses.replace(
        with_state, arrays={k: v for k, v in with_state.arrays.items() if k != "hidden_state"}
    )
    assert decode(wire(with_state), recurrent).arrays["hidden_state"].shape == (2, 5)
    with pytest.raises(DecodeError) as missing:
        decode(wire(without), recurrent)
    assert missing.value.reason is Reason.MISSING_ARRAY
    with pytest.raises(DecodeError) as unknown:
        decode(wire(with_state), plain)
    assert unknown.value.reason is Reason.UNKNOWN_ARRAY
