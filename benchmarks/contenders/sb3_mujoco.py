"""Stable-Baselines3 PPO on a MuJoCo task with CleanRL's ppo_continuous_action settings.

    .venv/bin/python -m benchmarks.contenders.sb3_mujoco --env-id HalfCheetah-v5 \\
        --total-steps 1000000 --seed 1 --run-dir DIR

Settings: CleanRL's defaults (not the zoo's), so that the two peers differ in code only:
one env (DummyVecEnv, Monitor inside so that episode returns are the raw ones), n_steps 2048,
batch_size 64 (CleanRL's 2048 / 32 minibatches), n_epochs 10, learning rate 3e-4 annealed
linearly to 0, gamma 0.99, gae_lambda 0.95, clip_range 0.2, ent_coef 0, vf_coef 0.5,
max_grad_norm 0.5, advantages normalized per minibatch; MlpPolicy with separate 64-64 tanh
actor and critic, orthogonal init, log_std_init 0, Adam eps 1e-5 (SB3's defaults, all equal to
CleanRL's); VecNormalize(norm_obs, norm_reward, clip 10, gamma 0.99) for CleanRL's
NormalizeObservation / NormalizeReward wrappers and their +-10 clips.
One difference remains: CleanRL clips the value loss (max of clipped and unclipped, at 0.2);
SB3's clip_range_vf clips the prediction instead, a different loss, so it stays at SB3's
default (off) rather than imitating CleanRL half-way.

Torch threads: 1 by default (--torch-threads N; 0: torch's default), recorded in the result:
the best setting for a 64-64 network on CPU, the one SB3's maintainers give
(DLR-RM/stable-baselines3#283: th.set_num_threads, OMP_NUM_THREADS=1; rl-zoo's train.py has
--num-threads for it) and ppomq's learner and actors run. Device: cpu.

After training, a greedy evaluation of --eval-episodes (10) on a fresh env: deterministic
actions (the mean, clipped to the bounds by SB3's predict) on observations normalized with
the training VecNormalize's frozen statistics, on ppomq's evaluation seeds (seed + 10_000 + i).
Writes DIR/result.json (mujoco_common).
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

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

from benchmarks.contenders.mujoco_common import (  # noqa: E402
    CLIP_OBS,
    EVAL_EPISODES,
    EVAL_SEED_OFFSET,
    EpisodeLog,
    write_result,
)

# CleanRL ppo_continuous_action's defaults in SB3's names.
CLEANRL_SETTINGS: dict[str, Any] = {
    "n_envs": 1,
    "n_steps": 2048,
    "batch_size": 64,
    "n_epochs": 10,
    "learning_rate": "lin_3e-4",
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "normalize_advantage": True,
    "policy": "MlpPolicy",
    "policy_kwargs": {
        "net_arch": {"pi": [64, 64], "vf": [64, 64]},
        "activation_fn": "Tanh",
        "ortho_init": True,
        "log_std_init": 0.0,
    },
    "vec_normalize": {
        "norm_obs": True,
        "norm_reward": True,
        "clip_obs": CLIP_OBS,
        "clip_reward": 10.0,
        "gamma": 0.99,
    },
}


def linear_schedule(initial: float) -> Callable[[float], float]:
    """`initial` times the fraction of training left: CleanRL's anneal_lr."""
    return lambda progress_remaining: progress_remaining * initial


class EpisodeCallback(BaseCallback):
    """Logs each finished training episode (Monitor's raw return) with its env step count."""

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


def make_env(env_id: str) -> VecNormalize:
    # Seeded by PPO(seed=...), which seeds the VecEnv's first reset.
    venv = DummyVecEnv([lambda: Monitor(gym.make(env_id))])
    vn = CLEANRL_SETTINGS["vec_normalize"]
    return VecNormalize(venv, **vn)


def make_model(env: VecNormalize, seed: int) -> PPO:
    hp = CLEANRL_SETTINGS
    pk = dict(hp["policy_kwargs"], activation_fn=torch.nn.Tanh)
    return PPO(
        hp["policy"],
        env,
        n_steps=hp["n_steps"],
        batch_size=hp["batch_size"],
        n_epochs=hp["n_epochs"],
        learning_rate=linear_schedule(3e-4),
        gamma=hp["gamma"],
        gae_lambda=hp["gae_lambda"],
        clip_range=hp["clip_range"],
        ent_coef=hp["ent_coef"],
        vf_coef=hp["vf_coef"],
        max_grad_norm=hp["max_grad_norm"],
        normalize_advantage=hp["normalize_advantage"],
        policy_kwargs=pk,
        seed=seed,
        device="cpu",
        verbose=0,
    )


def greedy_eval(model: PPO, norm: VecNormalize, env_id: str, episodes: int, seed: int) -> list:
    """Returns of `episodes` deterministic episodes; `normalize_obs` only reads the training
    statistics (they are updated in step/reset, never here), so they stay frozen."""
    env = gym.make(env_id)
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET + ep)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(norm.normalize_obs(obs[None]), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def versions() -> dict[str, str]:
    pkgs = ("stable_baselines3", "gymnasium", "mujoco", "torch", "numpy")
    return {p: importlib.metadata.version(p) for p in pkgs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="HalfCheetah-v5")
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--torch-threads", type=int, default=1, help="0: torch's default")
    args = parser.parse_args()
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    env = make_env(args.env_id)
    model = make_model(env, args.seed)
    log = EpisodeLog()
    callback = EpisodeCallback(log)
    model.learn(total_timesteps=args.total_steps, callback=callback)
    train_end = time.time()
    eval_returns = greedy_eval(model, env, args.env_id, args.eval_episodes, args.seed)
    doc = {
        "contender": "sb3",
        "env_id": args.env_id,
        "seed": args.seed,
        "versions": versions(),
        "hyperparameters": CLEANRL_SETTINGS,
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
