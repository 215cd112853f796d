"""Stable-Baselines3 PPO on an Atari game with the RL Zoo's Atari settings.

    .venv/bin/python -m benchmarks.contenders.sb3_atari --env-id BreakoutNoFrameskip-v4 \\
        --total-steps 1000000 --seed 1 --run-dir DIR

Settings: rl-baselines3-zoo's hyperparams/ppo.yml `atari` entry, as the zoo's train.py would
build them (https://github.com/DLR-RM/rl-baselines3-zoo/blob/master/hyperparams/ppo.yml):
AtariWrapper (no-op reset 30, frame skip 4 with max-pooling, episodic life, fire reset,
84x84 grayscale, sign-clipped rewards), frame_stack 4, CnnPolicy (the Nature CNN), n_envs 8
in a DummyVecEnv (the zoo's default --vec-env), n_steps 128, n_epochs 4, batch_size 256,
learning rate 2.5e-4 and clip range 0.1 both annealed linearly to 0 over the run (`lin_`),
vf_coef 0.5, ent_coef 0.01; the rest SB3's defaults (gamma 0.99, gae_lambda 0.95,
max_grad_norm 0.5, advantages normalized per minibatch). These equal CleanRL's ppo_atari.py,
which ppomq's atari preset follows, except that CleanRL anneals the learning rate only and
clips the value loss.

Returns: make_atari_env puts Monitor under AtariWrapper, so each logged episode is a whole
game (every life) with its raw score, the same figure ppomq reports.

Torch threads: torch's default (one per core), SB3's own; --torch-threads N overrides it
(recorded in the result either way). Device: cpu. No greedy evaluation unless
--eval-episodes N > 0 (the benchmark compares training returns). Writes DIR/result.json
(mujoco_common's format).
"""

from __future__ import annotations

import time

T_START = time.time()  # before the heavy imports: the harness times the whole process

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import ale_py  # noqa: E402
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_atari_env  # noqa: E402
from stable_baselines3.common.vec_env import VecFrameStack  # noqa: E402

from benchmarks.contenders.mujoco_common import (  # noqa: E402
    EVAL_SEED_OFFSET,
    EpisodeLog,
    write_result,
)

gym.register_envs(ale_py)

# The zoo's `atari` entry of hyperparams/ppo.yml, in its own names.
ZOO_ATARI: dict[str, Any] = {
    "env_wrapper": "stable_baselines3.common.atari_wrappers.AtariWrapper",
    "frame_stack": 4,
    "policy": "CnnPolicy",
    "n_envs": 8,
    "vec_env": "dummy",
    "n_steps": 128,
    "n_epochs": 4,
    "batch_size": 256,
    "learning_rate": "lin_2.5e-4",
    "clip_range": "lin_0.1",
    "vf_coef": 0.5,
    "ent_coef": 0.01,
}


def linear_schedule(initial: float) -> Callable[[float], float]:
    """The zoo's `lin_X`: X times the fraction of training left."""
    return lambda progress_remaining: progress_remaining * initial


class EpisodeCallback(BaseCallback):
    """Logs each finished game (Monitor's raw score) with its env step count."""

    def __init__(self, log: EpisodeLog) -> None:
        super().__init__()
        self.log = log
        self.first_step_unix: float | None = None

    def _on_rollout_start(self) -> None:
        if self.first_step_unix is None:
            self.first_step_unix = time.time()

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            ep = info.get("episode")
            if ep is not None:
                self.log.add(self.num_timesteps, ep["r"])
        return True


def make_env(env_id: str, n_envs: int, seed: int) -> VecFrameStack:
    venv = make_atari_env(env_id, n_envs=n_envs, seed=seed)
    return VecFrameStack(venv, n_stack=ZOO_ATARI["frame_stack"])


def make_model(env: VecFrameStack, seed: int) -> PPO:
    hp = ZOO_ATARI
    return PPO(
        hp["policy"],
        env,
        n_steps=hp["n_steps"],
        batch_size=hp["batch_size"],
        n_epochs=hp["n_epochs"],
        learning_rate=linear_schedule(2.5e-4),
        clip_range=linear_schedule(0.1),
        vf_coef=hp["vf_coef"],
        ent_coef=hp["ent_coef"],
        seed=seed,
        device="cpu",
        verbose=0,
    )


def greedy_eval(model: PPO, env_id: str, episodes: int, seed: int) -> list[float]:
    """Whole games, deterministic actions, on ppomq's evaluation seeds."""
    returns = []
    for ep in range(episodes):
        env = make_env(env_id, 1, seed + EVAL_SEED_OFFSET + ep)
        obs = env.reset()
        while True:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, _, infos = env.step(action)
            if "episode" in infos[0]:
                returns.append(float(infos[0]["episode"]["r"]))
                break
        env.close()
    return returns


def versions() -> dict[str, str]:
    pkgs = ("stable_baselines3", "gymnasium", "ale_py", "torch", "numpy")
    return {p: importlib.metadata.version(p) for p in pkgs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="BreakoutNoFrameskip-v4")
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--eval-episodes", type=int, default=0)
    parser.add_argument("--torch-threads", type=int, default=0, help="0: torch's default")
    args = parser.parse_args()
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    env = make_env(args.env_id, ZOO_ATARI["n_envs"], args.seed)
    model = make_model(env, args.seed)
    log = EpisodeLog()
    callback = EpisodeCallback(log)
    model.learn(total_timesteps=args.total_steps, callback=callback)
    train_end = time.time()
    eval_returns = greedy_eval(model, args.env_id, args.eval_episodes, args.seed)
    doc = {
        "contender": "sb3",
        "env_id": args.env_id,
        "seed": args.seed,
        "versions": versions(),
        "hyperparameters": ZOO_ATARI,
        "torch_threads": torch.get_num_threads(),
        "script_start_unix": T_START,
        "first_step_unix": callback.first_step_unix,
        "train_end_unix": train_end,
        "end_unix": time.time(),
        "env_steps": int(model.num_timesteps),
        "episodes": log.rows,
        "mean_return_20": log.mean_last(),
        "eval_returns": eval_returns,
        "eval_return": float(np.mean(eval_returns)) if eval_returns else None,
    }
    print(f"result: {write_result(run_dir, doc)}", file=sys.stderr)


if __name__ == "__main__":
    main()
