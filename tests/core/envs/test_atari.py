"""Atari through ale-py (ppomq.core.envs.atari): the preprocessing of real ALE envs, the per-game
episodes the actor reports, and a missing extra said in one line."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from ppomq.core.envs import EPISODES_IN_INFO, make_env, make_vector_env, rollout_spec_for
from ppomq.core.errors import UsageError
from tests.e2e.cli import PPOMQ, clean_env

pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")


def _lives(env) -> int:
    return env.unwrapped.ale.lives()


def test_the_wrapped_env_observes_a_uint8_stack_of_four_84x84_frames():
    spec = rollout_spec_for("ALE/Pong-v5", run_id="r", num_steps=8, max_bytes=1 << 30)
    assert spec.obs_shape == (4, 84, 84) and spec.obs_dtype == "uint8"
    assert spec.action.kind == "discrete" and spec.action.n == 6
    for training in (True, False):
        env = make_env("BreakoutNoFrameskip-v4", training=training)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        assert space.shape == (4, 84, 84) and space.dtype == np.uint8
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and space.contains(obs)
        env.close()


def test_v5_ids_skip_frames_in_the_wrapper_and_keep_sticky_actions():
    env = make_env("ALE/Breakout-v5")
    ale_env = env.unwrapped
    assert ale_env._frameskip == 1  # the 4-frame skip is AtariPreprocessing's
    assert ale_env.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    env.close()
    env = make_env("BreakoutNoFrameskip-v4")
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    env.close()


def test_frames_stack_oldest_first_and_a_reset_fills_every_slot_with_the_reset_frame():
    env = make_env("ALE/Breakout-v5", training=True)
    obs, _ = env.reset(seed=1)
    for k in range(1, 4):
        assert np.array_equal(obs[k], obs[0])  # padding_type="reset"
    frames = [obs[-1]] * 4  # what the reset fills the stack with
    for _ in range(6):
        obs, *_ = env.step(env.action_space.sample())
        frames.append(obs[-1])
        # the newest frame is last; the older ones shift one slot towards 0 each step
        assert np.array_equal(obs, np.stack(frames[-4:]))
    assert not np.array_equal(frames[-1], frames[0])  # the game moved (FIRE launched the ball)
    env.close()


def test_fire_reset_presses_fire_then_action_2_for_games_with_fire():
    from ppomq.core.envs.atari import FireReset, needs_fire

    class Record(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.actions = []

        def step(self, action):
            self.actions.append(int(action))
            return self.env.step(action)

    inner = Record(gym.make("ALE/Breakout-v5", frameskip=1))
    assert inner.unwrapped.get_action_meanings()[:2] == ["NOOP", "FIRE"] and needs_fire(inner)
    env = FireReset(inner)
    env.reset(seed=0)
    assert inner.actions == [1, 2]
    env.close()
    # The pipeline has it for Breakout and not for a game without FIRE.
    assert "FireReset" in str(make_env("ALE/Breakout-v5", training=True))
    freeway = make_env("ALE/Freeway-v5", training=True)  # NOOP, UP, DOWN
    assert not needs_fire(freeway) and "FireReset" not in str(freeway)
    freeway.close()


def _play_until(env, stop, limit=3000):
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        if stop(obs, reward, terminated, truncated, info):
            return obs, reward, terminated, truncated, info
    raise AssertionError(f"not reached in {limit} steps")


def test_a_lost_life_ends_the_training_episode_without_resetting_the_game():
    env = make_env("ALE/Breakout-v5", training=True)
    env.action_space.seed(0)
    env.reset(seed=0)
    assert _lives(env) == 5
    *_, info = _play_until(env, lambda o, r, te, tr, i: te or tr)
    assert _lives(env) == 4 and "episode" not in info  # a life, not the game
    frame = env.unwrapped.ale.getEpisodeFrameNumber()
    env.reset()  # what the vector env does after a done: one no-op step and FIRE, no reset
    assert _lives(env) == 4 and env.unwrapped.ale.getEpisodeFrameNumber() > frame
    env.close()


def test_training_rewards_are_clipped_to_their_sign_the_game_reports_the_raw_score():
    # Space Invaders scores 5 to 30 a hit. Until the first lost life a training and an
    # evaluation copy on the same seed and actions play the same game: the training reward
    # is the sign of the raw one. Then the training copy plays on to game over, whose
    # reported return is the raw score.
    train = make_env("SpaceInvadersNoFrameskip-v4", training=True)
    raw = make_env("SpaceInvadersNoFrameskip-v4", training=False)
    train.reset(seed=3)
    raw.reset(seed=3)
    rng = np.random.default_rng(3)
    raw_until_life_lost, clipped, steps = [], [], 0
    terminated = truncated = False
    while not (terminated or truncated):
        a = int(rng.integers(train.action_space.n))
        _, r_train, terminated, truncated, info = train.step(a)
        _, r_raw, *_ = raw.step(a)
        assert r_train == np.sign(r_raw)
        raw_until_life_lost.append(r_raw)
        clipped.append(r_train)
        steps += 1
    assert "episode" not in info and max(raw_until_life_lost) > 1  # clipping changed rewards
    raw.close()
    while "episode" not in info:
        _, r_train, terminated, truncated, info = train.step(int(rng.integers(6)))
        if (terminated or truncated) and "episode" not in info:  # a life, not the game
            train.reset()
        clipped.append(r_train)
        steps += 1
        assert steps < 5000
    assert set(np.unique(clipped)) <= {-1.0, 0.0, 1.0}
    game = info["episode"]
    assert game["r"] >= sum(raw_until_life_lost) > sum(clipped[: len(raw_until_life_lost)])
    assert game["r"] > sum(clipped) and game["l"] >= steps
    train.close()


class _RandomPolicy:
    """Uniform actions over n: what the runner asks of a policy, without a model."""

    def __init__(self, n: int) -> None:
        self.n, self.rng = n, np.random.default_rng(0)

    def act(self, obs):
        k = len(obs)
        return self.rng.integers(self.n, size=k), np.zeros(k, np.float32), np.zeros(k, np.float32)

    def value(self, obs):
        return np.zeros(len(obs), np.float32)


def test_vector_env_batches_are_n_stacks_and_the_runner_reports_whole_games_raw():
    from ppomq.actor.runner import EnvRunner
    from ppomq.learner.episodes import EpisodeBook

    n, t_steps, env_id = 2, 64, "ALE/Breakout-v5"
    envs = make_vector_env(env_id, n, [11, 12])
    assert envs.metadata[EPISODES_IN_INFO]
    spec = rollout_spec_for(env_id, run_id="r", num_steps=t_steps, max_bytes=1 << 30, num_envs=n)
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a", env_id=env_id)
    policy = _RandomPolicy(4)
    book = EpisodeBook()  # the learner's: it derives the games from the batch's own data
    returns, lengths, life_ends, rewards = [], [], 0, []
    for seq in range(40):
        batch = runner.sample(policy, policy_version=0, seq=seq)
        obs = batch.arrays["obs"]
        assert obs.shape == (t_steps, n, 4, 84, 84) and obs.dtype == np.uint8
        book.verify(batch)  # raw `scores`, game-over `episode_ends`: the claims agree
        assert batch.verified == batch.episodes and batch.unverified == 0
        returns += batch.episodes.returns
        lengths += batch.episodes.lengths
        life_ends += int(batch.arrays["terminated"].sum())
        rewards.append(batch.arrays["rewards"])
        if len(returns) >= 2:
            break
    envs.close()
    assert len(returns) >= 2, "no game ended"
    # Breakout has 5 lives: each game ended 5 training episodes and reported one return.
    assert life_ends >= 5 * len(returns)
    assert all(length > 50 for length in lengths)  # a game, not a life
    assert set(np.unique(np.concatenate(rewards))) <= {0.0, 1.0}  # clipped on the wire
    assert all(float(r).is_integer() and r >= 0 for r in returns)


def _blocked(module: str, code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter where `import <module>` fails, as when not installed."""
    prelude = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "BreakoutNoFrameskip-v4"])
def test_an_atari_id_without_ale_py_is_one_line_naming_the_extra(env_id):
    code = (
        "from ppomq.core.envs import rollout_spec_for\nfrom ppomq.core.errors import UsageError\n"
        f"try:\n    rollout_spec_for({env_id!r}, run_id='r', num_steps=4, max_bytes=1 << 20)\n"
        "except UsageError as exc:\n    print(exc)\n"
    )
    out = _blocked("ale_py", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1, out.stdout
    assert f"{env_id} needs a package that is not installed" in out.stdout
    assert "pip install -e '.[atari]'" in out.stdout


def test_an_atari_id_without_opencv_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(UsageError, match=r"pip install -e '\.\[atari\]'") as err:
        make_env("ALE/Pong-v5")
    assert "\n" not in str(err.value)


def test_train_on_an_atari_id_without_ale_py_exits_2_with_one_line(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['ale_py'] = None\n")
    env = clean_env()
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(site)
    out = subprocess.run(
        [*PPOMQ, "train", "--env-id", "ALE/Pong-v5", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install -e '.[atari]'" in lines[0], out.stderr
    assert not (tmp_path / "run").exists()


def test_evaluation_plays_whole_games_raw_and_fires_after_each_lost_life():
    env = make_env("ALE/Breakout-v5")  # what `ppomq eval` and the learner's evaluation make
    assert EPISODES_IN_INFO not in env.metadata and "EpisodicLife" not in str(env)
    env.action_space.seed(5)
    env.reset(seed=5)
    lives, life_losses, steps = _lives(env), 0, 0
    terminated = truncated = False
    while not (terminated or truncated):
        # NOOP only: the ball is in play again after a lost life only because FIRE was pressed
        _, _, terminated, truncated, _ = env.step(0)
        steps += 1
        if _lives(env) < lives:
            life_losses += 1
            lives = _lives(env)
        assert steps < 3000, "stuck: no FIRE after a lost life"
    assert terminated and life_losses == 5 and lives == 0
    env.close()
