"""ale-py's C++ ``AtariVectorEnv`` as the actor's vector env (``--env-backend ale``), for
Atari ids.

ale-py (the atari extra, already installed wherever Atari runs) steps N emulators in C++
threads and does the whole preprocessing there: no Python wrapper per env and per step, and
no OpenCV. ``make_ale_vector(env_id, num_envs, seeds)`` returns an object with the interface
the actor's EnvRunner uses of a Gymnasium vector env (``num_envs``, ``metadata``,
``reset() -> (obs, info)``, ``step(actions) -> (obs, reward, terminated, truncated, info)``
with SAME_STEP autoreset and ``info["final_obs"]``), as ``ppomq.core.envs.envpool`` does for
EnvPool. Evaluation (``ppomq eval``, the learner's final greedy evaluation) stays on
Gymnasium (``ppomq.core.envs.make_env``).

The mapping of ppomq.core.envs.atari's training pipeline onto ``AtariVectorEnv``'s options:

==========================================  =============================================
ppomq.core.envs.atari (Gymnasium)           ``AtariVectorEnv``
==========================================  =============================================
``gym.make(id, frameskip=1)``; sticky       ``repeat_action_probability`` and
actions and action set as the id says       ``full_action_space`` read from the id's
                                            registration (ALE/*-v5 0.25, *-v4 0.0)
27,000 agent steps (108,000 frames)         ``max_num_frames_per_episode=108000``
AtariPreprocessing noop_max=30              ``noop_max=30``
frame_skip=4, max of the last 2 frames      ``frameskip=4``, ``maxpool=True``
84x84 grayscale, cv2 INTER_AREA             ``img_height=img_width=84``, ``grayscale``
                                            (ALE's own area resize, no OpenCV: the same
                                            pixels)
EpisodicLife (training)                     ``life_loss_info=True``: a lost life is a
                                            termination, the game goes on
FireReset (FIRE, then action 2)             ``use_fire_reset=True`` (FIRE at a game's
                                            start)
TransformReward(sign) (training)            here, ``np.sign`` of ALE's raw reward
                                            (``reward_clipping=False``), so that the raw
                                            score is also known
FrameStackObservation(4), uint8 (4,84,84)   ``stack_num=4``, uint8 (4, 84, 84)
RecordEpisodeStatistics below episodic      built here: each step's raw reward in
life: whole games, raw scores               ``info["score"]``; a game ends at a
                                            truncation or at a termination that is not a
                                            lost life (``info["lives"]`` did not fall to
                                            a number above 0)
==========================================  =============================================

Differences that remain (ALE's C++ pipeline cannot be told otherwise):

- After a lost life the game goes on from where it is: no no-op step and no FIRE. The
  policy presses FIRE itself to serve the next ball (Breakout), as under ALE's v5 protocol;
  ppomq.core.envs.atari (like SB3's and CleanRL's wrappers and EnvPool) takes one no-op step
  and presses FIRE, then action 2.
- FIRE at a game's start is ALE's (one FIRE) against FIRE then action 2.
- The frame stack's start: at a game's start ALE fills the 3 older slots with zeros
  (Gymnasium: with the first frame); after a lost life it fills all 4 with the current
  frame. Past those first steps the frames are the same pixels as Gymnasium's, and the
  rewards and lives the same emulator's (tests/core/envs/test_ale_vector.py drives both
  with the same actions).
- Seeding: each env is seeded once with ppomq's per-env seed (``ppomq.core.envs.env_seed``);
  ALE's no-op draws are its own, so a seed gives other episodes than the gymnasium backend.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ppomq.core.envs import EPISODES_IN_INFO, check_env_id
from ppomq.core.errors import UsageError

FALLBACK = "--env-backend gymnasium"

#: Frames in an episode, as ALE's own limit for the registered ids: 27,000 agent steps.
MAX_FRAMES = 108_000


def ale_task(env_id: str) -> tuple[str, dict[str, Any]]:
    """(ROM name, the id's own emulator options) for a registered Atari id; a one-line
    UsageError naming the fix for anything else."""
    import gymnasium as gym

    from ppomq.core.envs.atari import is_atari

    check_env_id(env_id)
    if not is_atari(env_id):
        raise UsageError(f"--env-backend ale covers Atari ids, not {env_id}; pass {FALLBACK}")
    kwargs = gym.envs.registry[env_id].kwargs
    options = {
        "repeat_action_probability": float(kwargs.get("repeat_action_probability", 0.0)),
        "full_action_space": bool(kwargs.get("full_action_space", False)),
    }
    return str(kwargs["game"]), options


def default_threads(num_envs: int) -> int:
    """One C++ thread per env, at most one per core this process may run on."""
    return max(1, min(num_envs, len(os.sched_getaffinity(0))))


class AleVectorEnv:
    """ale-py's ``AtariVectorEnv`` seen as the actor's vector env (module docstring): sign-
    clipped rewards, episodic life, whole games with raw scores in ``info``."""

    def __init__(
        self, env_id: str, num_envs: int, seeds: list[int], *, num_threads: int = 0
    ) -> None:
        from ale_py.vector_env import AtariVectorEnv

        game, options = ale_task(env_id)
        self.envs = AtariVectorEnv(
            game,
            num_envs,
            num_threads=num_threads or default_threads(num_envs),
            max_num_frames_per_episode=MAX_FRAMES,
            autoreset_mode="SameStep",
            img_height=84,
            img_width=84,
            grayscale=True,
            stack_num=4,
            frameskip=4,
            maxpool=True,
            noop_max=30,
            episodic_life=False,  # ALE's would restart the whole game at a lost life
            life_loss_info=True,
            reward_clipping=False,
            use_fire_reset=True,
            **options,
        )
        self.num_envs = num_envs
        self.single_observation_space = self.envs.single_observation_space
        self.single_action_space = self.envs.single_action_space
        self.observation_space = self.envs.observation_space
        self.action_space = self.envs.action_space
        # ALE takes int32 seeds; ppomq's per-env seeds are uint32.
        self._seeds = np.array([int(s) & 0x7FFFFFFF for s in seeds], dtype=np.int64)
        self.action_space.seed(int(self._seeds[0]))
        self.metadata: dict[str, Any] = {"autoreset_mode": "same_step", EPISODES_IN_INFO: True}
        self._lives = np.zeros(num_envs, np.int32)
        self._clipped = np.zeros(num_envs, np.float32)

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start every env's game from its own seed (given at creation; `seed` is accepted
        and ignored, as EnvPool's backend does)."""
        obs, info = self.envs.reset(seed=self._seeds)
        self._lives[:] = info["lives"]
        return obs, dict(info)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):  # ALE asserts, which says less
            raise ValueError(f"expected {self.num_envs} actions, got shape {actions.shape}")
        obs, raw, terminated, truncated, info = self.envs.step(actions.astype(np.int32, copy=False))
        lives = info["lives"]
        # A termination where lives fell to a number above 0 is a lost life; any other (lives
        # at 0, or a new game's lives after SAME_STEP's reset) is the game's end.
        lost_life = terminated & (lives > 0) & (lives < self._lives)
        game_over = (terminated & ~lost_life) | truncated
        self._lives[:] = lives
        out: dict[str, Any] = {"score": raw.astype(np.float32), "lives": lives}
        if game_over.any():
            out["final_info"] = {"_episode": game_over}
        if terminated.any() or truncated.any():
            out["final_obs"], out["_final_obs"] = info["final_obs"], terminated | truncated
        np.sign(raw, out=self._clipped, casting="unsafe")
        return obs, self._clipped.copy(), terminated, truncated, out

    def close(self, **kwargs: Any) -> None:
        """ale-py frees its threads when the object goes; nothing else holds them."""
        self.envs = None  # type: ignore[assignment]


def make_ale_vector(env_id: str, num_envs: int, seeds: list[int]) -> AleVectorEnv:
    return AleVectorEnv(env_id, num_envs, seeds)
