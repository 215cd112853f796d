"""Atari (ale-py) through Gymnasium: the standard DQN/PPO preprocessing, from Gymnasium's own
wrappers where they exist.

The pipeline, innermost first (`make_atari`):

1. ``gym.make(env_id, frameskip=1)``: the emulator steps one frame per step, so that the
   skipping below is the only skipping. ``ALE/*-v5`` ids keep v5's sticky actions
   (``repeat_action_probability=0.25``, Machado et al. 2018, "Revisiting the ALE", the
   protocol the v5 ids exist for); ``*NoFrameskip-v4`` ids have none (0.0). Either way the
   episode is cut at 108,000 frames (27,000 agent steps) by ALE's own
   ``max_num_frames_per_episode``, reported as truncation.
2. ``gymnasium.wrappers.AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84,
   terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)``: up to 30 random
   no-ops on reset, the action repeated for 4 frames with the reward summed and the
   observation the max of the last two frames, then 84x84 grayscale uint8 (cv2 INTER_AREA).
   Its own ``terminal_on_life_loss`` is not used: it resets the whole game at a lost life,
   where episodic life (4.) only ends the training episode.
3. ``gymnasium.wrappers.RecordEpisodeStatistics``: below episodic life and reward clipping, so
   ``info["episode"]`` gives each whole game's raw score and length (agent steps) when the game
   ends, as CleanRL's ``ppo_atari.py`` records it below its ``EpisodicLifeEnv``.
4. ``EpisodicLife`` (training only): a lost life ends the training episode (terminated, so no
   bootstrap past it) but the game goes on; the reset that follows is one no-op step, and
   only a game over resets the emulator (SB3's ``EpisodicLifeEnv``).
5. ``FireReset`` for games whose action 1 is FIRE (and which have at least 3 actions): FIRE,
   then action 2, after every reset, so a new life starts with the ball in play (SB3's
   ``FireResetEnv``). In evaluation, where a lost life does not end the episode, it also
   presses them after each lost life, which is what the policy saw in training.
6. ``TransformReward(np.sign)`` (training only): rewards clipped to their sign (SB3's
   ``ClipRewardEnv``).
7. ``gymnasium.wrappers.FrameStackObservation(stack_size=4)``: the last 4 frames, oldest
   first, as one uint8 array of shape (4, 84, 84), channels first; after a reset (a lost life
   in training included) every slot holds the reset frame (``padding_type="reset"``).

Evaluation (``training=False``: ``ppomq eval``, the learner's final greedy evaluation) has the
same observations and actions and leaves out 4. and 6.: an episode is a whole game and its
return the raw score.

Training reports per game, not per training episode: the env's metadata carries
``EPISODES_IN_INFO``; each step's raw score is in ``info["score"]`` (``ScoreInInfo``, below
the clipping) and a game's end is where ``info["final_info"]["_episode"]`` (3. above) marks
one. The actor sums each game's score and length from those steps and sends them with the
batch (``scores``, ``episode_ends``), so that the learner derives every game's figures from
the batch itself (proto/ROLLOUT.md "Episodes"). Steps the wrappers take inside a reset
(no-ops, FIRE after a reset) are not agent steps and are not counted.

Against the references: CleanRL's ``ppo_atari.py`` (``BreakoutNoFrameskip-v4``; SB3's
``NoopResetEnv(30)``, ``MaxAndSkipEnv(4)``, ``EpisodicLifeEnv``, ``FireResetEnv``,
``ClipRewardEnv``, then gym's resize to 84x84, grayscale and ``FrameStack(4)``) and SB3's
``AtariWrapper`` (the same, its ``WarpFrame`` grayscaling the RGB frame with cv2) differ from
this in: the grayscale comes from ALE's own grayscale screen and the max is taken over the
grayscale frames (SB3/CleanRL: over RGB, then grayscale), which Gymnasium's
``AtariPreprocessing`` does; with an ``ALE/*-v5`` id the actions are sticky (their
``NoFrameskip-v4`` ids are not; pass a ``*NoFrameskip-v4`` id for their exact setting);
episode lengths count agent steps, not frames.

References: https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo_atari.py (make_env);
https://github.com/DLR-RM/stable-baselines3/blob/master/stable_baselines3/common/atari_wrappers.py;
Machado et al. 2018, https://arxiv.org/abs/1709.06009 (sticky actions, section 5);
https://ale.farama.org/environments/ (v5 defaults).
"""

from __future__ import annotations

import re
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from ppomq.core.envs import EPISODES_IN_INFO
from ppomq.core.errors import install_hint

#: Ids that are Atari by name alone, so that a missing ale-py can be said as such.
_ATARI_NAME = re.compile(r"ALE/.+|[A-Z]\w*(NoFrameskip|Deterministic)-v[04]")

INSTALL = install_hint("atari")


def looks_atari(env_id: str) -> bool:
    """An id that only ale-py registers (ALE/..., ...NoFrameskip-v4, ...Deterministic-v4)."""
    return _ATARI_NAME.fullmatch(env_id) is not None


def register_ale() -> bool:
    """Import ale-py, which registers the Atari ids with Gymnasium; False when not installed."""
    try:
        import ale_py
    except ImportError:
        return False
    # Its banner on every env made would come before `ppomq train`'s own first line.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    return True


def is_atari(env_id: str) -> bool:
    """A registered id whose env is ale-py's AtariEnv."""
    spec = gym.envs.registry.get(env_id)
    entry = getattr(spec, "entry_point", None)
    return isinstance(entry, str) and entry.startswith("ale_py")


#: The pipeline's observation: 4 stacked 84x84 grayscale frames, channels first.
FRAMES = (4, 84, 84)


def atari_spaces(env_id: str) -> tuple[gym.spaces.Box, gym.spaces.Space]:
    """(observation space, action space) of `make_atari(env_id)`, from the bare emulator env:
    the preprocessing fixes the observation, the id fixes the actions. Needs no OpenCV, so
    that a machine with the C++ backend alone (ppomq.core.envs.ale_vector) knows them."""
    env = gym.make(env_id)
    try:
        action_space = env.action_space
    finally:
        env.close()
    return gym.spaces.Box(0, 255, FRAMES, np.uint8), action_space


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (terminated) while the game goes on; reset then takes one
    no-op step instead of resetting the emulator, unless the game is over or a seed is given.
    SB3's ``EpisodicLifeEnv`` (stable_baselines3/common/atari_wrappers.py)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        # The last life (lives -> 0) is left to the game's own game over, as in SB3.
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # past the lost life
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


def needs_fire(env: gym.Env) -> bool:
    """SB3's FireResetEnv condition: action 1 is FIRE and there are at least 3 actions."""
    meanings = env.unwrapped.get_action_meanings()
    return len(meanings) >= 3 and meanings[1] == "FIRE"


class FireReset(gym.Wrapper):
    """FIRE (action 1) then action 2 after each reset (SB3's ``FireResetEnv``); with
    ``after_life_loss``, also after each lost life that does not end the episode."""

    def __init__(self, env: gym.Env, *, after_life_loss: bool = False) -> None:
        super().__init__(env)
        self.after_life_loss = after_life_loss
        self.lives = 0

    def _fire(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        total = 0.0
        for action in (1, 2):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self._fire()
        if terminated or truncated:  # rare: the episode ended while firing
            obs, info = self.env.reset(options=options)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.after_life_loss:
            lives = self.env.unwrapped.ale.lives()
            if lives < self.lives and not (terminated or truncated):
                obs, fired, terminated, truncated, info = self._fire()
                reward = float(reward) + fired
                lives = self.env.unwrapped.ale.lives()
            self.lives = lives
        return obs, reward, terminated, truncated, info


def sign(reward: SupportsFloat) -> float:
    """Reward clipping as SB3's ClipRewardEnv: the sign of the reward."""
    return float(np.sign(reward))


class ScoreInInfo(gym.Wrapper):
    """The step's raw score in ``info["score"]``, below reward clipping: the actor sums each
    game's score from it and sends it as the batch's ``scores`` (proto/ROLLOUT.md)."""

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "score": float(reward)}


def make_atari(env_id: str, *, training: bool, **kwargs: Any) -> gym.Env:
    """`env_id` (an ale-py id) with the preprocessing of the module docstring; `training`
    adds episodic life and reward clipping. kwargs go to gym.make."""
    from gymnasium.wrappers import (
        AtariPreprocessing,
        FrameStackObservation,
        RecordEpisodeStatistics,
        TransformReward,
    )

    kwargs.setdefault("frameskip", 1)
    env = gym.make(env_id, **kwargs)
    env = AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=4,
        screen_size=84,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    if training:
        env = RecordEpisodeStatistics(env)
        env = EpisodicLife(env)
    if needs_fire(env):
        env = FireReset(env, after_life_loss=not training)
    if training:
        env = ScoreInInfo(env)
        env = TransformReward(env, sign)
    env = FrameStackObservation(env, stack_size=4)
    if training:
        env.metadata = {**env.metadata, EPISODES_IN_INFO: True}
    return env
