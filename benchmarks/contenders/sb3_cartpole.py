"""Stable-Baselines3 PPO on CartPole-v1 with rl-baselines3-zoo's tuned hyperparameters.

    python -m benchmarks.contenders.sb3_cartpole --seed 0 [--target 475] [--cap 100000]

zoo's hyperparams/ppo.yml, CartPole-v1: n_envs 8 (DummyVecEnv, Monitor-wrapped, as zoo's
make_vec_env does), n_steps 32, batch_size 256, gae_lambda 0.8, gamma 0.98, n_epochs 20,
ent_coef 0.0, learning_rate lin_1e-3, clip_range lin_0.2, n_timesteps 1e5 (the linear
schedules run over it, so the cap stays 1e5), policy MlpPolicy. The run stops when the
mean of the last 20 finished episodes reaches the target, or at the cap. Prints one
`E2E_RESULT {json}` line.

Torch threads: 1 by default (--torch-threads N; 0: torch's default), recorded in the
result: the best setting for a 64-64 network on CPU, the one SB3's maintainers give
(DLR-RM/stable-baselines3#283: th.set_num_threads, OMP_NUM_THREADS=1; rl-zoo's train.py has
--num-threads for it) and ppomq's learner and actors run.
"""

from __future__ import annotations

import time

T_START = time.time()  # before the heavy imports: the harness also times process start

import argparse  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from benchmarks.contenders.common import SolveTracker, emit, thin  # noqa: E402

T_IMPORTED = time.time()

ZOO_CARTPOLE: dict[str, Any] = {
    "n_envs": 8,
    "n_timesteps": 100_000,
    "n_steps": 32,
    "batch_size": 256,
    "gae_lambda": 0.8,
    "gamma": 0.98,
    "n_epochs": 20,
    "ent_coef": 0.0,
    "learning_rate": "lin_1e-3",
    "clip_range": "lin_0.2",
}


def linear_schedule(initial: float) -> Any:
    """zoo's `lin_X`: X times the fraction of training that remains."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial

    return schedule


class SolveCallback(BaseCallback):
    """Stops training at the solve criterion; times the first env step and the update."""

    def __init__(self, tracker: SolveTracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.first_step_unix: float | None = None
        self.rollout_s = 0.0
        self._rollout_t0 = 0.0
        self.update_s = 0.0
        self._update_t0: float | None = None

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        if self.first_step_unix is None:
            self.first_step_unix = time.time()  # the first env.step follows at once
        if self._update_t0 is not None:
            self.update_s += now - self._update_t0  # train() ran between two rollouts
        self._rollout_t0 = now

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        self.rollout_s += now - self._rollout_t0
        self._update_t0 = now

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            ep = info.get("episode")
            if ep is not None and self.tracker.add(ep["r"], self.num_timesteps):
                return False
        return True


def main() -> None:
    """Train once and print the result line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--cap", type=int, default=ZOO_CARTPOLE["n_timesteps"])
    parser.add_argument("--torch-threads", type=int, default=1, help="0: torch's default")
    args = parser.parse_args()
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    hp = ZOO_CARTPOLE
    env = make_vec_env("CartPole-v1", n_envs=hp["n_envs"], seed=args.seed, vec_env_cls=DummyVecEnv)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=hp["n_steps"],
        batch_size=hp["batch_size"],
        gae_lambda=hp["gae_lambda"],
        gamma=hp["gamma"],
        n_epochs=hp["n_epochs"],
        ent_coef=hp["ent_coef"],
        learning_rate=linear_schedule(1e-3),
        clip_range=linear_schedule(0.2),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    tracker = SolveTracker(args.target)
    callback = SolveCallback(tracker)
    model.learn(total_timesteps=args.cap, callback=callback)
    end = time.time()
    if tracker.solved_unix is None and callback._update_t0 is not None:
        callback.update_s += time.perf_counter() - callback._update_t0  # the last train()
    emit(
        {
            "contender": "sb3",
            "hyperparameters": hp,
            "torch_threads": torch.get_num_threads(),
            "script_start_unix": T_START,
            "imports_done_unix": T_IMPORTED,
            "first_step_unix": callback.first_step_unix,
            "solved_at_env_steps": tracker.solved_at_env_steps,
            "solved_unix": tracker.solved_unix,
            "env_steps": int(model.num_timesteps),
            "end_unix": end,
            "episodes": tracker.episodes,
            "time_split_s": {
                "rollout": round(callback.rollout_s, 3),
                "update": round(callback.update_s, 3),
            },
            "curve": thin(tracker.curve),
        }
    )


if __name__ == "__main__":
    main()
