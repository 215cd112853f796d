"""The worked examples in proto/ROLLOUT.md and proto/WEIGHTS.md are real: they decode."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ppomq.proto import (
    ActionSpace,
    EpisodeStats,
    RolloutBatch,
    RolloutSpec,
    decode,
    decode_weights,
    encode,
    encode_weights,
    pack_weights,
    unpack_tensors,
)

PROTO = Path(__file__).resolve().parents[2] / "proto"


def _hex_frames(doc: str) -> list[bytes]:
    text = (PROTO / doc).read_text()
    blocks = re.findall(r"```hex frame-(\d+)\n(.*?)```", text, flags=re.S)
    assert [int(i) for i, _ in blocks] == list(range(len(blocks)))
    return [bytes.fromhex("".join(body.split())) for _, body in blocks]


def test_rollout_md_example_decodes_to_the_batch_it_describes():
    frames = _hex_frames("ROLLOUT.md")
    spec = RolloutSpec(
        run_id="demo",
        obs_shape=(2,),
        obs_dtype="float32",
        action=ActionSpace("discrete", n=2),
        num_steps=2,
        num_envs=1,
        env_id="CartPole-v1",
    )
    batch = decode(frames, spec)
    assert (batch.actor_id, batch.seq, batch.policy_version, batch.sent) == ("a0", 7, 3, 8)
    assert batch.created_ns == 1_700_000_000_000_000_000
    assert batch.episodes == EpisodeStats([2.0], [2])
    arrays = batch.arrays
    np.testing.assert_array_equal(arrays["obs"], [[[0.5, -1.0]], [[0.25, 2.0]]])
    np.testing.assert_array_equal(arrays["actions"], [[1], [0]])
    np.testing.assert_array_equal(arrays["logp"], [[-0.5], [-0.75]])
    np.testing.assert_array_equal(arrays["terminated"], [[False], [True]])
    # And the codec still writes exactly these bytes: the page cannot drift from it.
    again = RolloutBatch(
        run_id="demo",
        actor_id="a0",
        seq=7,
        policy_version=3,
        env_id="CartPole-v1",
        num_envs=1,
        num_steps=2,
        arrays={k: np.array(v) for k, v in arrays.items()},
        episodes=EpisodeStats([2.0], [2]),
        created_ns=1_700_000_000_000_000_000,
        sent=8,
    )
    assert [np.asarray(f).tobytes() if not isinstance(f, bytes) else f for f in encode(again)] == (
        frames
    )


def test_weights_md_example_decodes_and_verifies():
    frames = _hex_frames("WEIGHTS.md")
    header, blob = decode_weights(frames)
    assert (header.version, header.learner_step, header.env_steps) == (5, 10, 2560)
    tensors = unpack_tensors(header, blob)
    np.testing.assert_array_equal(tensors["pi.weight"], [[0.5, -0.5]])
    np.testing.assert_array_equal(tensors["pi.bias"], [0.25])
    h2, blob2 = pack_weights(
        5,
        {"pi.weight": tensors["pi.weight"], "pi.bias": tensors["pi.bias"]},
        model={"arch": "mlp"},
        learner_step=10,
        env_steps=2560,
        created_ns=1_700_000_000_000_000_000,
    )
    assert [bytes(f) for f in encode_weights(h2, blob2)] == frames
