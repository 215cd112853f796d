"""ROLLOUT 1.2's frames layout: each frame of a stacked observation on the wire once."""

from __future__ import annotations

import math
import re
from pathlib import Path

import msgpack
import numpy as np
import pytest

from benchmarks.messages.factory import make_batch, make_spec
from ppomq.proto import (
    ActionSpace,
    DecodeError,
    EpisodeStats,
    Reason,
    RolloutBatch,
    RolloutSpec,
    decode,
    encode,
)
from ppomq.proto.rollout_frames import to_frames, wants_frames

PROTO = Path(__file__).resolve().parents[2] / "proto"
S, F = 4, (6, 5)


def _stacks(rng: np.random.Generator, t_steps: int, n: int, resets: dict[int, set[int]]):
    """obs [T, N, S, *F] as FrameStackObservation builds it: each step drops the oldest frame
    and appends the new one; after a reset (before step t for the envs in resets[t]) all S
    slots hold the reset frame. Step 0 continues an episode begun before the batch."""
    obs = np.empty((t_steps, n, S, *F), np.uint8)
    for i in range(n):
        stack = [rng.integers(0, 256, F, dtype=np.uint8) for _ in range(S)]
        for t in range(t_steps):
            if t in resets and i in resets[t]:
                stack = [rng.integers(0, 256, F, dtype=np.uint8)] * S
            elif t:
                stack = [*stack[1:], rng.integers(0, 256, F, dtype=np.uint8)]
            obs[t, i] = np.stack(stack)
    return obs


def _spec(t: int, n: int, **kw) -> RolloutSpec:
    return make_spec(t=t, n=n, obs_shape=(S, *F), obs_dtype="uint8", **kw)


def _batch(spec: RolloutSpec, obs: np.ndarray, seq: int = 1) -> RolloutBatch:
    batch = make_batch(spec, np.random.default_rng(seq), seq=seq)
    batch.arrays["obs"] = obs
    return batch


def _wire(frames) -> list[bytes]:
    return [f if isinstance(f, bytes) else np.asarray(f).tobytes() for f in frames]


def _table(frames) -> list[dict]:
    return msgpack.unpackb(frames[0])["arrays"]


def _reason(frames, spec) -> Reason | None:
    try:
        decode(frames, spec)
    except DecodeError as exc:
        return exc.reason
    return None


def test_round_trip_across_episode_ends_and_resets_rebuilds_the_stacks_exactly():
    t, n = 12, 3
    rng = np.random.default_rng(5)
    resets = {4: {0}, 5: {0, 2}, 11: {1}}  # env 0 twice in a row: a one-step episode
    obs = _stacks(rng, t, n, resets)
    spec = _spec(t, n)
    batch = _batch(spec, obs)
    frames = _wire(encode(batch))
    names = [e["name"] for e in _table(frames)]
    assert "obs" not in names and names[:2] == ["frames", "obs_frames"]
    assert msgpack.unpackb(frames[0])["schema"] == "ppomq.rollout/1.4"
    got = decode(frames, spec)
    assert "frames" not in got.arrays and "obs_frames" not in got.arrays
    assert got.arrays["obs"].dtype == np.uint8
    np.testing.assert_array_equal(got.arrays["obs"], obs)
    # K: the first step's S frames per env, then one a step; a reset adds its one frame in
    # place of that step's one.
    k = _table(frames)[0]["shape"][0]
    assert k == n * (S + t - 1)
    for name in ("actions", "rewards", "terminated"):
        np.testing.assert_array_equal(got.arrays[name], batch.arrays[name])


def test_to_frames_is_right_whatever_the_content():
    """Random stacks (no shifting at all), all-equal stacks and repeats: always exact."""
    rng = np.random.default_rng(1)
    for obs in (
        rng.integers(0, 256, (5, 2, S, *F), dtype=np.uint8),
        np.zeros((5, 2, S, *F), np.uint8),
        rng.integers(0, 2, (7, 3, S, 1, 2), dtype=np.uint8),  # many accidental matches
        rng.integers(0, 256, (4, 2, 2, 3, 3), dtype=np.uint8),  # a frame of 9 bytes
    ):
        frames, idx = to_frames(obs)
        assert idx.dtype == np.int32 and 1 <= len(frames) <= idx.size
        np.testing.assert_array_equal(frames[idx], obs)
        assert set(np.unique(idx)) == set(range(len(frames)))  # every frame used


def test_the_encoder_picks_frames_for_uint8_stacks_only():
    assert wants_frames(np.zeros((2, 1, 4, 84, 84), np.uint8))
    assert not wants_frames(np.zeros((2, 1, 4, 84, 84), np.float32))
    assert not wants_frames(np.zeros((2, 1, 84, 84), np.uint8))  # one grey frame, no stack
    assert not wants_frames(np.zeros((2, 1, 16, 8, 8), np.uint8))  # S > 8
    obs = _stacks(np.random.default_rng(0), 3, 2, {})
    spec = _spec(3, 2)
    names = [e["name"] for e in _table(encode(_batch(spec, obs), frames=False))]
    assert "obs" in names and "frames" not in names


def test_a_1_1_obs_batch_still_decodes():
    t, n = 4, 2
    obs = _stacks(np.random.default_rng(2), t, n, {2: {1}})
    spec = _spec(t, n)
    frames = _wire(encode(_batch(spec, obs), frames=False))
    h = msgpack.unpackb(frames[0])
    h["schema"] = "ppomq.rollout/1.1"
    frames[0] = msgpack.packb(h)
    got = decode(frames, spec)
    np.testing.assert_array_equal(got.arrays["obs"], obs)


def test_bytes_per_env_step_for_atari_stacks_are_about_four_times_fewer():
    t, n = 128, 8
    rng = np.random.default_rng(3)
    # One new 84x84 frame per step; env 0 resets mid-rollout.
    stream = rng.integers(0, 256, (t + S, n, 84, 84), dtype=np.uint8)
    obs = np.stack([stream[s : s + t] for s in range(S)], axis=2)  # [T, N, S, 84, 84]
    obs[60:, 0] = obs[60, 0, -1]  # env 0: a reset at step 60, then the same frame
    spec = make_spec(t=t, n=n, obs_shape=(S, 84, 84), obs_dtype="uint8", max_bytes=1 << 26)
    batch = _batch(spec, obs)
    before = sum(memoryview(f).nbytes for f in encode(batch, frames=False)[1:2])
    after_frames = encode(batch)
    after = sum(memoryview(f).nbytes for f in after_frames[1:3])  # frames + obs_frames
    assert before / (t * n) == S * 84 * 84  # 28,224 bytes a step
    # Per env: S frames for step 0, then one a step (the reset's one frame in place of its
    # step's new one); and 16 index bytes a step.
    assert after == n * (S + t - 1) * 84 * 84 + t * n * S * 4
    assert 3.85 < before / after < 4.0  # 3.90
    np.testing.assert_array_equal(decode(_wire(after_frames), spec).arrays["obs"], obs)


# --- malformed frames layouts: each refused with its reason, never a crash ---------------


def _good(t: int = 3, n: int = 2, **kw):
    spec = _spec(t, n, **kw)
    obs = _stacks(np.random.default_rng(9), t, n, {1: {1}})
    frames = _wire(encode(_batch(spec, obs)))
    return spec, frames, msgpack.unpackb(frames[0]), obs


def _where(h: dict, name: str) -> int:
    return next(i for i, e in enumerate(h["arrays"]) if e["name"] == name)


def _with_index(value: int, at: int = 0):
    spec, frames, h, _ = _good()
    i = _where(h, "obs_frames") + 1
    idx = np.frombuffer(frames[i], "<i4").copy()
    idx[at] = value
    frames[i] = idx.tobytes()
    return spec, frames


def test_an_index_out_of_range_is_invalid_value():
    _, _, h, _ = _good()
    k = h["arrays"][_where(h, "frames")]["shape"][0]
    for value in (k, -1, 2**31 - 1, -(2**31)):
        spec, frames = _with_index(value, at=3)
        assert _reason(frames, spec) is Reason.INVALID_VALUE, value


def test_a_frame_no_stack_uses_is_invalid_value():
    spec, frames, h, _ = _good()
    i = _where(h, "frames")
    h["arrays"][i]["shape"][0] += 1  # one frame more, referenced by nothing
    frames[0] = msgpack.packb(h)
    frames[i + 1] += bytes(math.prod(F))
    assert _reason(frames, spec) is Reason.INVALID_VALUE


@pytest.mark.parametrize("k", [0, 3 * 2 * S + 1, 2**31 - 1], ids=["none", "more_than_TNS", "huge"])
def test_a_frame_count_outside_1_to_tns_is_shape_mismatch(k):
    spec, frames, h, _ = _good()
    i = _where(h, "frames")
    h["arrays"][i]["shape"][0] = k
    frames[0] = msgpack.packb(h)
    frames[i + 1] = bytes(k * math.prod(F)) if k < 1000 else frames[i + 1]
    assert _reason(frames, spec) is Reason.SHAPE_MISMATCH


@pytest.mark.parametrize(
    "shape", [[5, 6], [5, 5, 6], [5, 6, 5, 1], [5, 30]], ids=["rank", "swapped", "extra", "flat"]
)
def test_a_wrong_frame_shape_is_shape_mismatch(shape):
    spec, frames, h, _ = _good()
    i = _where(h, "frames")
    k = h["arrays"][i]["shape"][0]
    h["arrays"][i]["shape"] = [k, *shape[1:]] if len(shape) > 1 else [k]
    frames[0] = msgpack.packb(h)
    assert _reason(frames, spec) is Reason.SHAPE_MISMATCH


def test_wrong_dtypes_and_index_shapes_are_refused():
    spec, frames, _h, _ = _good()
    for name, dtype in (("frames", "int8"), ("frames", "float32"), ("obs_frames", "int64")):
        h2 = msgpack.unpackb(frames[0])
        h2["arrays"][_where(h2, name)]["dtype"] = dtype
        assert _reason([msgpack.packb(h2), *frames[1:]], spec) is Reason.DTYPE_MISMATCH
    h2 = msgpack.unpackb(frames[0])
    h2["arrays"][_where(h2, "obs_frames")]["shape"] = [3, 2, S + 1]
    assert _reason([msgpack.packb(h2), *frames[1:]], spec) is Reason.SHAPE_MISMATCH


def test_both_layouts_or_neither_or_half_are_refused():
    spec, frames, _h, obs = _good()
    # both: obs as well as frames + obs_frames (and obs with either half)
    for keep in (("frames", "obs_frames"), ("frames",), ("obs_frames",)):
        h2 = msgpack.unpackb(frames[0])
        body = list(frames[1:])
        drop = [_where(h2, x) for x in ("frames", "obs_frames") if x not in keep]
        for j in sorted(drop, reverse=True):
            del h2["arrays"][j], body[j]
        h2["arrays"].append({"name": "obs", "dtype": "uint8", "shape": list(obs.shape)})
        assert _reason([msgpack.packb(h2), *body, obs.tobytes()], spec) is (
            Reason.DUPLICATE_ARRAY
        ), keep
    # neither, or one half of the frames layout alone
    for drop in (("frames", "obs_frames"), ("frames",), ("obs_frames",)):
        h2 = msgpack.unpackb(frames[0])
        body = list(frames[1:])
        for j in sorted((_where(h2, x) for x in drop), reverse=True):
            del h2["arrays"][j], body[j]
        assert _reason([msgpack.packb(h2), *body], spec) is Reason.MISSING_ARRAY, drop


def test_the_frames_layout_needs_a_stacked_observation():
    """A spec whose obs has rank 1 knows no frames: unknown_array (ignored by a newer minor,
    then obs is missing)."""
    t, n = 3, 2
    spec = make_spec(t=t, n=n, obs_shape=(S,), obs_dtype="uint8")
    batch = make_batch(spec, np.random.default_rng(0), seq=1)
    batch.arrays["obs"] = batch.arrays["obs"].reshape(t, n, S, 1)  # as if [S, 1]
    frames = _wire(encode(batch, frames=True))
    assert _reason(frames, spec) is Reason.UNKNOWN_ARRAY
    h = msgpack.unpackb(frames[0])
    h["schema"] = "ppomq.rollout/1.9"
    assert _reason([msgpack.packb(h), *frames[1:]], spec) is Reason.MISSING_ARRAY


def test_a_rebuilt_obs_over_the_cap_is_oversize():
    """Few frames may stand for a big obs: the learner's byte cap bounds what it rebuilds."""
    t, n = 64, 8
    spec = make_spec(t=t, n=n, obs_shape=(S, 32, 32), obs_dtype="uint8", max_bytes=1 << 20)
    obs = np.zeros((t, n, S, 32, 32), np.uint8)  # 2 MiB rebuilt from 512 KiB of frames
    frames = _wire(encode(_batch(spec, obs)))
    assert sum(map(len, frames)) < spec.max_bytes
    assert _reason(frames, spec) is Reason.OVERSIZE


def test_random_damage_to_a_frames_batch_never_crashes_or_misbuilds():
    spec, frames, h, _obs = _good(t=4, n=2)
    rng = np.random.default_rng(17)
    i = _where(h, "obs_frames") + 1
    for _ in range(300):
        damaged = list(frames)
        body = bytearray(damaged[i])
        for _ in range(int(rng.integers(1, 4))):
            body[int(rng.integers(0, len(body)))] = int(rng.integers(0, 256))
        damaged[i] = bytes(body)
        try:
            got = decode(damaged, spec)
        except DecodeError as exc:
            assert exc.reason is Reason.INVALID_VALUE
            continue
        idx = np.frombuffer(damaged[i], "<i4").reshape(4, 2, S)
        fr = np.frombuffer(damaged[_where(h, "frames") + 1], np.uint8).reshape(-1, *F)
        np.testing.assert_array_equal(got.arrays["obs"], fr[idx])


# --- the worked example in ROLLOUT.md ------------------------------------------------------


def _example_frames() -> list[bytes]:
    text = (PROTO / "ROLLOUT.md").read_text()
    blocks = re.findall(r"```hex stack-frame-(\d+)\n(.*?)```", text, flags=re.S)
    assert [int(i) for i, _ in blocks] == list(range(len(blocks))) and blocks
    return [bytes.fromhex("".join(body.split())) for _, body in blocks]


def _example_obs() -> np.ndarray:
    a, b, c, d = (np.arange(4, dtype=np.uint8).reshape(2, 2) + 4 * j for j in range(4))
    return np.stack([np.stack([a, b])[None], np.stack([b, c])[None], np.stack([d, d])[None]])


def test_rollout_md_frames_example_decodes_and_is_what_the_codec_writes():
    frames = _example_frames()
    spec = RolloutSpec(
        run_id="demo",
        obs_shape=(2, 2, 2),
        obs_dtype="uint8",
        action=ActionSpace("discrete", n=2),
        num_steps=3,
        num_envs=1,
        env_id="Toy-v0",
    )
    got = decode(frames, spec)
    obs = _example_obs()
    np.testing.assert_array_equal(got.arrays["obs"], obs)
    assert np.frombuffer(frames[2], "<i4").tolist() == [0, 1, 1, 2, 3, 3]
    again = RolloutBatch(
        run_id="demo",
        actor_id="a0",
        seq=0,
        policy_version=0,
        env_id="Toy-v0",
        num_envs=1,
        num_steps=3,
        arrays={
            "obs": obs,
            "actions": np.array([[1], [0], [1]], np.int64),
            "logp": np.full((3, 1), -0.5, np.float32),
            "values": np.zeros((3, 1), np.float32),
            "rewards": np.array([[0.0], [1.0], [0.0]], np.float32),
            "terminated": np.array([[False], [True], [False]]),
            "truncated": np.zeros((3, 1), bool),
            "final_values": np.zeros((3, 1), np.float32),
            "bootstrap_value": np.zeros(1, np.float32),
        },
        episodes=EpisodeStats([1.0], [2]),
        created_ns=0,
    )
    assert _wire(encode(again)) == frames
