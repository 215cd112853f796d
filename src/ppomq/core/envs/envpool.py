"""EnvPool as the actor's vector env (``--env-backend envpool``), for Atari and MuJoCo ids.

``make_envpool(env_id, num_envs, seeds)`` returns an object with exactly the interface the
actor's EnvRunner uses of a Gymnasium vector env (``num_envs``, ``metadata``,
``reset() -> (obs, info)``, ``step(actions) -> (obs, reward, terminated, truncated, info)``
with SAME_STEP autoreset and ``info["final_obs"]``), so the runner does not know which
backend it steps. Evaluation (``ppomq eval``, the learner's final greedy evaluation) stays on
Gymnasium (``ppomq.core.envs.make_env``).

Autoreset. EnvPool resets an env on the step *after* its episode ended (Gymnasium's
NEXT_STEP). The actor wants SAME_STEP: the step that ends an episode returns the first
observation of the next one, and the final observation in ``info["final_obs"]``. So after a
step that ends episodes, the ended envs alone take one more EnvPool step (``env_id`` = them;
the action is ignored, EnvPool resets), whose observations replace theirs. For Atari with
episodic life that reset continues the game after a lost life (EnvPool's own episodic-life
reset), exactly as an EnvPool NEXT_STEP loop would.

Atari: the mapping of ppomq.core.envs.atari's training pipeline onto EnvPool's options

==========================================  =============================================
ppomq.core.envs.atari (Gymnasium)           EnvPool ``<Game>-v5``
==========================================  =============================================
``gym.make(id, frameskip=1)``; sticky       ``repeat_action_probability``: the id's own
actions as the id implies (ALE/*-v5 0.25,   (read from its Gymnasium registration: 0.25
*NoFrameskip-v4 0.0)                        for ALE/*-v5, 0.0 for *-v4); EnvPool's own
                                            default is 0.0 whatever the id
27,000 agent steps (108,000 frames)         ``max_episode_steps=27000`` (truncation)
AtariPreprocessing noop_max=30              ``noop_max=30``
frame_skip=4, max of the last 2 frames      ``frame_skip=4`` (max-pools the last 2 frames)
84x84, cv2 INTER_AREA                       ``img_height=img_width=84``,
                                            ``use_inter_area_resize=True``
grayscale (ALE's grayscale screen)          ``gray_scale=True`` (ALE's grayscale screen)
EpisodicLife (training)                     ``episodic_life=True``
FireReset (FIRE, then action 2)             ``use_fire_reset=True``
TransformReward(sign) (training)            ``reward_clip=True``
FrameStackObservation(4), uint8 (4,84,84)   ``stack_num=4``, uint8 (4, 84, 84)
RecordEpisodeStatistics below episodic      built here: raw rewards (EnvPool's
life: whole games, raw scores               ``info["reward"]``, before clipping) summed per
                                            game; a game ends at a termination with
                                            ``info["lives"] == 0`` or at a truncation
minimal action set                          ``full_action_space=False``
==========================================  =============================================

Differences that remain (EnvPool's C++ pipeline cannot be told otherwise):

- Reset after a lost life: EnvPool takes its random no-ops (up to 30) and one FIRE again at
  every reset, a lost life's included, and keeps the frame stack running;
  ppomq.core.envs.atari takes one no-op step, then FIRE and action 2, and fills the stack with
  the new frame.
- FIRE reset is one FIRE (EnvPool) against FIRE then action 2 (SB3's FireResetEnv).
- No-ops: EnvPool draws 1 to noop_max no-op frames (less one when it fires); Gymnasium's
  AtariPreprocessing draws 0 to noop_max.
- Max-pool and resize are EnvPool's (the max of the last two grayscale frames, then
  cv::resize INTER_AREA to 84x84); Gymnasium does the same in Python, so frames agree up to
  the rounding of the resize.
- Episode lengths reported count the policy's steps in the game; ppomq.core.envs.atari's count also
  holds the no-op step its episodic-life reset takes.
- Seeding: EnvPool seeds each env once, at creation (the per-env seeds of
  ``ppomq.core.envs.env_seed``); its random streams are not Gymnasium's, so the same seed gives
  other episodes than the gymnasium backend.

MuJoCo: the same id (``HalfCheetah-v5``, ``-v4`` ...) in EnvPool, with its defaults, which are
Gymnasium's for these versions (frame_skip 5, ctrl_cost_weight 0.1, reset_noise_scale 0.1,
1,000-step limit); observations come as float64 and the runner casts them to float32, as it
does Gymnasium's; returns are summed from the rewards, as for any env without
``EPISODES_IN_INFO``. EnvPool's MuJoCo is its own build of the simulator, so trajectories are
not bit-equal to Gymnasium's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ppomq.core.envs import EPISODES_IN_INFO, spaces_of
from ppomq.core.errors import UsageError, install_hint

INSTALL = install_hint("envpool")
FALLBACK = "--env-backend gymnasium"


def _envpool() -> Any:
    try:
        import envpool
    except ImportError:
        raise UsageError(
            f"--env-backend envpool needs envpool, which is not installed ({INSTALL}), "
            f"or pass {FALLBACK}"
        ) from None
    return envpool


def envpool_task(env_id: str) -> tuple[str, str, dict[str, Any]]:
    """(family "atari" | "mujoco", EnvPool task id, EnvPool options) for a Gymnasium id that
    is registered (ppomq.core.envs.check_env_id first); a UsageError naming the fix otherwise."""
    import gymnasium as gym

    envpool = _envpool()
    spec = gym.envs.registry[env_id]
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    known = set(envpool.list_all_envs())
    if entry.startswith("ale_py"):
        game = str(spec.kwargs.get("game", ""))
        task = "".join(part.capitalize() for part in game.split("_")) + "-v5"
        options = {
            "repeat_action_probability": float(spec.kwargs.get("repeat_action_probability", 0)),
            "full_action_space": bool(spec.kwargs.get("full_action_space", False)),
            "max_episode_steps": 27_000,
            "noop_max": 30,
            "frame_skip": 4,
            "img_height": 84,
            "img_width": 84,
            "use_inter_area_resize": True,
            "gray_scale": True,
            "stack_num": 4,
            "episodic_life": True,
            "reward_clip": True,
            "use_fire_reset": True,
        }
        family = "atari"
    elif entry.startswith("gymnasium.envs.mujoco"):
        task, options, family = env_id, {}, "mujoco"
    else:
        raise UsageError(
            f"--env-backend envpool covers Atari and MuJoCo ids, not {env_id}; pass {FALLBACK}"
        )
    if task not in known:
        raise UsageError(
            f"EnvPool has no {task} (for {env_id}); pass {FALLBACK} or an id EnvPool has"
        )
    return family, task, options


class EnvPoolVectorEnv:
    """An EnvPool pool seen as a Gymnasium vector env with SAME_STEP autoreset (module
    docstring); Atari pools report whole games in ``info["final_info"]["episode"]``."""

    def __init__(self, env_id: str, num_envs: int, seeds: list[int]) -> None:
        from gymnasium.vector.utils import batch_space

        envpool = _envpool()
        self.family, self.task, options = envpool_task(env_id)
        # EnvPool takes int32 seeds; ppomq's per-env seeds are uint32.
        env_seed = [int(s) & 0x7FFFFFFF for s in seeds]
        self.pool = envpool.make(
            self.task,
            env_type="gymnasium",
            num_envs=num_envs,
            batch_size=num_envs,
            seed=env_seed[0],
            env_seed=env_seed,
            **options,
        )
        self.num_envs = num_envs
        # Gymnasium's own spaces of the id (EnvPool's MuJoCo Box actions are float64, where
        # Gymnasium's are float32; shapes and bounds agree, tests check them).
        self.single_observation_space, self.single_action_space = spaces_of(env_id)
        mine = (self.pool.observation_space.shape, getattr(self.pool.action_space, "shape", ()))
        theirs = (self.single_observation_space.shape, self.single_action_space.shape)
        if mine != theirs:
            raise UsageError(
                f"EnvPool's {self.task} has spaces of shape {mine}, Gymnasium's {env_id} "
                f"{theirs}; pass {FALLBACK}"
            )
        # Batched, as a Gymnasium vector env's: action_space.sample() is N actions.
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.action_space.seed(env_seed[0])
        self.atari = self.family == "atari"
        self.metadata: dict[str, Any] = {"autoreset_mode": "same_step"}
        if self.atari:
            self.metadata[EPISODES_IN_INFO] = True
        self._game_return = np.zeros(num_envs, np.float64)
        self._game_length = np.zeros(num_envs, np.int64)
        self._game_time = np.zeros(num_envs, np.float64)
        self._all = np.arange(num_envs, dtype=np.int32)

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env (seeds were given at creation; `seed` is accepted and ignored)."""
        obs, info = self.pool.reset(self._all)
        self._game_return[:] = 0.0
        self._game_length[:] = 0
        return obs, dict(info)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        if actions.shape[:1] != (self.num_envs,):  # EnvPool would read past the array
            raise ValueError(f"expected {self.num_envs} actions, got shape {actions.shape}")
        obs, reward, terminated, truncated, info = self.pool.step(actions)
        out: dict[str, Any] = {}
        if self.atari:
            self._game_return += info["reward"]  # raw, before EnvPool's clipping
            self._game_length += 1
            # the runner's `scores` (ppomq.core.envs.atari.ScoreInInfo)
            out["score"] = info["reward"]
        done = terminated | truncated
        if done.any():
            ids = np.flatnonzero(done).astype(np.int32)
            final_obs = np.empty(self.num_envs, dtype=object)
            for i in ids:
                final_obs[i] = obs[i].copy()
            out["final_obs"], out["_final_obs"] = final_obs, done.copy()
            if self.atari:
                game_over = (terminated & (info["lives"] == 0)) | truncated
                if game_over.any():
                    r = np.where(game_over, self._game_return, 0.0)
                    n = np.where(game_over, self._game_length, 0)
                    out["final_info"] = {
                        "episode": {"r": r, "l": n, "t": np.zeros(self.num_envs)},
                        "_episode": game_over.copy(),
                    }
                    self._game_return[game_over] = 0.0
                    self._game_length[game_over] = 0
            # NEXT_STEP -> SAME_STEP: the ended envs take EnvPool's reset step now.
            zero = np.zeros((ids.size, *actions.shape[1:]), dtype=actions.dtype)
            reset_obs, *_, reset_info = self.pool.step(zero, ids)
            obs = np.array(obs, copy=True)
            obs[reset_info["env_id"]] = reset_obs
        return obs, reward, terminated, truncated, out

    def close(self, **kwargs: Any) -> None:
        self.pool.close()


def make_envpool(env_id: str, num_envs: int, seeds: list[int]) -> EnvPoolVectorEnv:
    return EnvPoolVectorEnv(env_id, num_envs, seeds)
