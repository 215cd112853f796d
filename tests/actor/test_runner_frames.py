"""A real Atari rollout from the runner goes on the wire as frames (ROLLOUT 1.2) and the
learner's decode rebuilds the env's own stacks exactly, across life losses and resets."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

pytest.importorskip("ale_py")

from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import make_vector_env, rollout_spec_for
from ppomq.proto import decode, encode


class _RandomPolicy:
    def __init__(self, n: int) -> None:
        self.n, self.rng = n, np.random.default_rng(0)

    def act(self, obs):
        k = len(obs)
        return self.rng.integers(self.n, size=k), np.zeros(k, np.float32), np.zeros(k, np.float32)

    def value(self, obs):
        return np.zeros(len(obs), np.float32)


def test_atari_rollouts_round_trip_as_frames_with_about_four_times_fewer_bytes():
    n, t_steps, env_id = 2, 64, "ALE/Breakout-v5"
    envs = make_vector_env(env_id, n, [21, 22])
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t_steps, max_bytes=1 << 28, num_envs=n)
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a", env_id=env_id)
    policy = _RandomPolicy(4)
    ends = 0
    try:
        for seq in range(12):
            batch = runner.sample(policy, policy_version=0, seq=seq)
            obs = batch.arrays["obs"]
            frames = [bytes(memoryview(f)) for f in encode(batch)]
            table = msgpack.unpackb(frames[0])["arrays"]
            assert [e["name"] for e in table[:2]] == ["frames", "obs_frames"]
            got = decode(frames, spec)
            np.testing.assert_array_equal(got.arrays["obs"], obs)
            sent = len(frames[1]) + len(frames[2])
            # at most S + T - 1 frames an env plus what episode ends add, and the indices
            assert sent <= obs.nbytes / 3.5
            ends += int((batch.arrays["terminated"] | batch.arrays["truncated"]).sum())
            if ends >= 2 and seq >= 2:
                break
    finally:
        envs.close()
    assert ends >= 2, "no episode ended: the resets were not exercised"
