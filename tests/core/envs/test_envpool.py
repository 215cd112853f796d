"""--env-backend envpool on a real EnvPool: the actor's vector env from EnvPool, with the
interface, spaces and episode reports of the gymnasium backend (ppomq.core.envs.envpool).

What needs no EnvPool (the id mapping, the one-line errors, the NEXT_STEP to SAME_STEP
conversion on a scripted pool) is in test_envpool_mapping.py and runs everywhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import EPISODES_IN_INFO, env_seed, make_vector_env, rollout_spec_for
from ppomq.core.envs.envpool import EnvPoolVectorEnv
from ppomq.core.models import build_model, model_spec_for
from ppomq.proto import decode, encode

pytest.importorskip("envpool", reason="envpool is not installed (the envpool extra)")
pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")
pytest.importorskip("mujoco", reason="the mujoco extra is not installed")


def _seeds(n: int) -> list[int]:
    return [env_seed(1, 0, i) for i in range(n)]


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "HalfCheetah-v5"])
def test_spaces_shapes_and_dtypes_equal_the_gymnasium_backends(env_id):
    n = 3
    gym_envs = make_vector_env(env_id, n, _seeds(n))
    pool = make_vector_env(env_id, n, _seeds(n), backend="envpool")
    try:
        assert isinstance(pool, EnvPoolVectorEnv) and pool.num_envs == n
        assert pool.single_observation_space.shape == gym_envs.single_observation_space.shape
        assert pool.single_action_space == gym_envs.single_action_space
        assert pool.action_space == gym_envs.action_space
        raw = pool.pool.action_space  # EnvPool's own: float64 Box for MuJoCo, same bounds
        assert raw.shape == pool.single_action_space.shape
        if env_id == "HalfCheetah-v5":
            np.testing.assert_array_equal(raw.low, pool.single_action_space.low)
            np.testing.assert_array_equal(raw.high, pool.single_action_space.high)
        spec = rollout_spec_for(env_id, run_id="r", num_steps=4, max_bytes=1 << 26)
        assert bool(pool.metadata.get(EPISODES_IN_INFO)) == bool(
            gym_envs.metadata.get(EPISODES_IN_INFO)
        )
        for envs in (gym_envs, pool):
            obs, _ = envs.reset()
            assert obs.shape == (n, *spec.obs_shape)
            assert np.asarray(obs, dtype=spec.obs_dtype).dtype == np.dtype(spec.obs_dtype)
            out = envs.step(envs.action_space.sample())
            assert out[0].shape == (n, *spec.obs_shape)
            assert out[1].shape == out[2].shape == out[3].shape == (n,)
            assert out[2].dtype == out[3].dtype == np.bool_
        if env_id.startswith("ALE/"):
            assert obs.dtype == np.uint8 and obs.shape == (n, 4, 84, 84)
            assert pool.pool.config["repeat_action_probability"] == 0.25  # v5: sticky
    finally:
        gym_envs.close()
        pool.close()


def test_noframeskip_v4_ids_have_no_sticky_actions():
    pool = make_vector_env("BreakoutNoFrameskip-v4", 1, _seeds(1), backend="envpool")
    cfg = pool.pool.config
    assert cfg["repeat_action_probability"] == 0.0
    assert (cfg["frame_skip"], cfg["noop_max"], cfg["stack_num"]) == (4, 30, 4)
    assert cfg["episodic_life"] and cfg["reward_clip"] and cfg["use_fire_reset"]
    pool.close()


@pytest.mark.parametrize("env_id, t", [("ALE/Pong-v5", 8), ("HalfCheetah-v5", 1005)])
def test_the_real_runner_samples_a_valid_rollout_from_envpool(env_id, t):
    n = 2
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t, max_bytes=1 << 28)
    envs = make_vector_env(env_id, n, _seeds(n), backend="envpool")
    torch.manual_seed(1)
    policy = build_model(model_spec_for(spec, hidden=[16, 16]))
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id=env_id)
    batch = runner.sample(policy.inference(), policy_version=0, seq=0)
    got = decode([bytes(memoryview(f)) for f in encode(batch)], spec)
    a = got.arrays
    assert a["obs"].shape == (t, n, *spec.obs_shape) and a["obs"].dtype == spec.obs_dtype
    if env_id == "HalfCheetah-v5":
        # Ends only by its 1,000-step limit: truncation, bootstrapped from the final obs;
        # the returns reported are sums of the raw rewards.
        assert a["truncated"][999].all() and not a["truncated"][:999].any()
        assert not a["terminated"].any() and np.all(a["final_values"][999] != 0.0)
        assert batch.episodes.lengths == [1000, 1000]
        np.testing.assert_allclose(
            batch.episodes.returns, a["rewards"][:1000].sum(0, dtype=np.float64), rtol=1e-5
        )
        # SAME_STEP: the step after the limit starts the next episode, not a reset step.
        assert not np.array_equal(a["obs"][1000], a["obs"][999])
    envs.close()


def test_breakout_reports_whole_games_with_raw_scores_through_the_runner():
    # Random play loses Breakout's 5 lives within a few hundred steps: each lost life ends a
    # training episode (terminated), the runner reports only the whole game.
    env_id, n, t = "ALE/Breakout-v5", 2, 400
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t, max_bytes=1 << 28)
    envs = make_vector_env(env_id, n, _seeds(n), backend="envpool")
    torch.manual_seed(1)
    policy = build_model(model_spec_for(spec, hidden=[16, 16]))
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id=env_id)
    assert runner.episodes_in_info
    returns, lengths, terms, clipped = [], [], 0, 0.0
    for seq in range(4):
        batch = runner.sample(policy.inference(), policy_version=0, seq=seq)
        returns += batch.episodes.returns
        lengths += batch.episodes.lengths
        terms += int(batch.arrays["terminated"].sum())
        clipped += float(batch.arrays["rewards"].sum())
        assert set(np.unique(batch.arrays["rewards"])) <= {-1.0, 0.0, 1.0}
        if len(returns) >= 2:
            break
    envs.close()
    assert len(returns) >= 1, "no Breakout game ended in 1,600 random steps"
    # Each game has 5 lives: at least 5 training-episode ends per game reported.
    assert terms >= 5 * len(returns)
    assert all(length > 5 for length in lengths)
    assert all(r >= 0 and float(r).is_integer() for r in returns)
