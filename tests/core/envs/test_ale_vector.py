"""--env-backend ale on ale-py's real C++ AtariVectorEnv: the interface, spaces, rewards and
whole-game reports of the gymnasium backend (ppomq.core.envs.ale_vector), and how far its
frames are from the gymnasium pipeline's on the same emulator trajectory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import EPISODES_IN_INFO, env_seed, make_vector_env, rollout_spec_for
from ppomq.core.envs.ale_vector import AleVectorEnv, ale_task
from ppomq.core.errors import UsageError
from ppomq.core.models import build_model, model_spec_for
from ppomq.proto import decode, encode

pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")


def _seeds(n: int) -> list[int]:
    return [env_seed(1, 0, i) for i in range(n)]


def _cv2() -> bool:
    try:
        import cv2  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "BreakoutNoFrameskip-v4"])
def test_spaces_and_step_shapes_equal_the_gymnasium_backends(env_id):
    n = 3
    envs = make_vector_env(env_id, n, _seeds(n), backend="ale")
    try:
        assert isinstance(envs, AleVectorEnv) and envs.num_envs == n
        spec = rollout_spec_for(env_id, run_id="r", num_steps=4, max_bytes=1 << 26)
        assert envs.single_observation_space.shape == spec.obs_shape == (4, 84, 84)
        assert spec.obs_dtype == "uint8" and envs.single_observation_space.dtype == np.uint8
        assert envs.metadata[EPISODES_IN_INFO]
        if _cv2():  # the gymnasium pipeline needs OpenCV; the C++ backend does not
            gym_envs = make_vector_env(env_id, n, _seeds(n))
            assert envs.single_action_space == gym_envs.single_action_space
            assert envs.single_observation_space == gym_envs.single_observation_space
            gym_envs.close()
        obs, _ = envs.reset()
        assert obs.shape == (n, 4, 84, 84) and obs.dtype == np.uint8
        obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert obs.shape == (n, 4, 84, 84) and reward.shape == (n,) and reward.dtype == np.float32
        assert terminated.dtype == truncated.dtype == np.bool_
        assert info["score"].shape == (n,)
    finally:
        envs.close()


def test_the_ids_own_sticky_actions_and_action_set_are_kept():
    assert ale_task("ALE/Breakout-v5") == (
        "breakout",
        {"repeat_action_probability": 0.25, "full_action_space": False},
    )
    assert ale_task("BreakoutNoFrameskip-v4")[1]["repeat_action_probability"] == 0.0


@pytest.mark.parametrize("env_id", ["CartPole-v1", "HalfCheetah-v5"])
def test_an_id_it_does_not_cover_is_one_line_naming_the_fallback(env_id):
    with pytest.raises(UsageError, match="--env-backend gymnasium") as err:
        make_vector_env(env_id, 1, [1], backend="ale")
    assert "\n" not in str(err.value)


def test_a_lost_life_ends_a_training_episode_and_a_game_over_ends_the_game():
    # Random Breakout loses its 5 lives within a few hundred steps per game.
    n = 4
    envs = AleVectorEnv("BreakoutNoFrameskip-v4", n, _seeds(n))
    envs.reset()
    rng = np.random.default_rng(0)
    terms = np.zeros(n, int)
    score = np.zeros(n)
    games: list[tuple[int, float]] = []
    for _ in range(3000):
        _, reward, terminated, truncated, info = envs.step(rng.integers(0, 4, n))
        np.testing.assert_array_equal(reward, np.sign(info["score"]))  # clipped from raw
        score += info["score"]
        terms += terminated
        over = (info.get("final_info") or {}).get("_episode", np.zeros(n, bool))
        assert not (over & ~(terminated | truncated)).any()
        for i in np.flatnonzero(over):
            games.append((int(terms[i]), float(score[i])))
            terms[i], score[i] = 0, 0.0
        if len(games) >= 3:
            break
    envs.close()
    assert len(games) >= 3, "no three Breakout games ended in 3,000 random steps"
    # Each game: 4 lost lives and the game over, 5 terminations; the score is the game's.
    assert all(t == 5 for t, _ in games), games
    assert all(s >= 0 and s.is_integer() for _, s in games)


def test_frames_rewards_and_lives_equal_the_gymnasium_pipelines_on_one_trajectory():
    # No no-ops, no FIRE at the start and no sticky actions: the same actions drive the same
    # emulator, so rewards and lives agree, and so do the frames (ALE's resize gives
    # OpenCV's INTER_AREA pixels); only the stack's start differs: ALE fills the 3 older
    # slots with zeros, Gymnasium with the first frame.
    pytest.importorskip("cv2", reason="the gymnasium pipeline needs OpenCV")
    import gymnasium as gym
    from ale_py.vector_env import AtariVectorEnv
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    from ppomq.core.envs.atari import register_ale

    register_ale()
    ale = AtariVectorEnv("breakout", 1, num_threads=1, noop_max=0, reward_clipping=False,
                         use_fire_reset=False, autoreset_mode="SameStep")  # fmt: skip
    env = FrameStackObservation(
        AtariPreprocessing(gym.make("BreakoutNoFrameskip-v4", frameskip=1), noop_max=0),
        stack_size=4,
    )
    a_obs, _ = ale.reset(seed=np.array([3]))
    g_obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(a_obs[0][3], g_obs[3])
    assert not a_obs[0][:3].any()
    rng = np.random.default_rng(1)
    rewards, steps = 0.0, 0
    for steps in range(1, 2000):
        action = int(rng.integers(0, 4))
        a_obs, a_r, a_term, _, a_info = ale.step(np.array([action], np.int32))
        g_obs, g_r, g_term, _, _ = env.step(action)
        assert (float(a_r[0]), bool(a_term[0])) == (float(g_r), g_term)
        rewards += float(g_r)
        if g_term:  # ALE's SAME_STEP has already started the next game
            break
        assert int(a_info["lives"][0]) == env.unwrapped.ale.lives()
        if steps >= 3:
            np.testing.assert_array_equal(a_obs[0], g_obs)
    env.close()
    assert g_term and rewards > 0, "the trajectory neither ended nor scored: it compares too little"


def test_the_real_runner_reports_whole_games_from_the_ale_backend():
    env_id, n, t = "BreakoutNoFrameskip-v4", 2, 400
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t, max_bytes=1 << 28)
    envs = make_vector_env(env_id, n, _seeds(n), backend="ale")
    torch.manual_seed(1)
    policy = build_model(model_spec_for(spec, hidden=[16, 16]))
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id=env_id)
    assert runner.episodes_in_info
    returns, terms = [], 0
    for seq in range(4):
        batch = runner.sample(policy.inference(), policy_version=0, seq=seq)
        got = decode([bytes(memoryview(f)) for f in encode(batch)], spec)
        assert got.arrays["obs"].shape == (t, n, 4, 84, 84)
        assert set(np.unique(batch.arrays["rewards"])) <= {-1.0, 0.0, 1.0}
        returns += batch.episodes.returns
        terms += int(batch.arrays["terminated"].sum())
        if len(returns) >= 2:
            break
    envs.close()
    assert len(returns) >= 1, "no Breakout game ended in 1,600 random steps"
    assert terms >= 5 * len(returns)
    assert all(r >= 0 and float(r).is_integer() for r in returns)
