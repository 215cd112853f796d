"""Ray RLlib PPO or APPO on CartPole-v1 with RLlib's own CartPole example settings.

    <rllib venv>/bin/python -m benchmarks.contenders.rllib_cartpole --algo ppo --seed 0

RLlib pins gymnasium==1.2.2 and ppomq pins 1.4.0, so this runs from its own venv
(benchmarks/contenders/requirements-rllib.txt). Settings are those of RLlib's tuned
examples `tuned_examples/ppo/cartpole_ppo.py` and `tuned_examples/appo/cartpole_appo.py`
(new API stack), with the sampling side fixed at 8 envs (one env runner, 8 envs in it)
and the example's evaluation workers off (every contender is judged on its training
episodes). RLlib's own metric (`metrics_num_episodes_for_smoothing = 20`, read after
each `train()` call) is recorded too, but the criterion itself is computed exactly as for
the other contenders: a thin env wrapper logs every finished episode (time, env steps so far,
return) and its first step, and the run stops after the `train()` call during which the mean
of the last 20 episodes reached the target. Prints one `E2E_RESULT {json}` line.
"""

from __future__ import annotations

import time

T_START = time.time()

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import ray  # noqa: E402
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig  # noqa: E402
from ray.tune.registry import register_env  # noqa: E402

from benchmarks.contenders.common import SOLVE_WINDOW, SolveTracker, emit, thin  # noqa: E402

T_IMPORTED = time.time()
ENV_NAME = "CartPole-v1-episode-log"


class EpisodeLog(gym.Wrapper):
    """CartPole-v1 that writes, in `log_dir`, the Unix time of its first step and one line
    per finished episode: `unix env_steps return`, where env_steps counts the steps of
    every env of this process (all 8 live in the one env runner, so it is the system's)."""

    steps_in_process = 0  # shared by the instances of one process

    def __init__(self, env: gym.Env, log_dir: str) -> None:
        super().__init__(env)
        self.log_dir = Path(log_dir)
        self.stamped = False
        self.episode_return = 0.0
        self.log_path = self.log_dir / f"episodes-{os.getpid()}"

    def step(self, action: Any) -> Any:
        if not self.stamped:
            self.stamped = True
            (self.log_dir / f"first-{os.getpid()}-{id(self)}").write_text(f"{time.time():.6f}")
        obs, reward, terminated, truncated, info = self.env.step(action)
        EpisodeLog.steps_in_process += 1
        self.episode_return += float(reward)
        if terminated or truncated:
            with open(self.log_path, "a") as fh:
                fh.write(f"{time.time():.6f} {EpisodeLog.steps_in_process} {self.episode_return}\n")
            self.episode_return = 0.0
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        self.episode_return = 0.0
        return self.env.reset(**kwargs)


def read_episodes(log_dir: str) -> list[tuple[float, int, float]]:
    """Every finished episode so far, in time order: (unix, env_steps, return)."""
    rows = []
    for path in Path(log_dir).glob("episodes-*"):
        for line in path.read_text().splitlines():
            t, steps, ret = line.split()
            rows.append((float(t), int(steps), float(ret)))
    rows.sort()
    return rows


def make_env(env_config: dict[str, Any]) -> gym.Env:
    return EpisodeLog(gym.make("CartPole-v1"), env_config["log_dir"])


def build_config(algo: str, seed: int, log_dir: str) -> Any:
    """RLlib's CartPole example config for `algo`, 8 envs in one env runner."""
    common_env = {"env": ENV_NAME, "env_config": {"log_dir": log_dir}}
    if algo == "ppo":
        from ray.rllib.algorithms.ppo import PPOConfig

        config = (
            PPOConfig()
            .environment(**common_env)
            .rl_module(
                model_config=DefaultModelConfig(
                    fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True
                )
            )
            .training(gamma=0.99, lr=0.0003, num_epochs=6, vf_loss_coeff=0.01, use_kl_loss=True)
        )
        settings = {
            "example": "rllib/tuned_examples/ppo/cartpole_ppo.py",
            "fcnet_hiddens": [32],
            "fcnet_activation": "linear",
            "vf_share_layers": True,
            "gamma": 0.99,
            "lr": 0.0003,
            "num_epochs": 6,
            "vf_loss_coeff": 0.01,
            "use_kl_loss": True,
        }
    elif algo == "appo":
        from ray.rllib.algorithms.appo import APPOConfig

        config = (
            APPOConfig()
            .environment(**common_env)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[32]))
            .training(
                train_batch_size_per_learner=1000,
                vf_loss_coeff=0.05,
                entropy_coeff=0.01,
                num_epochs=2,
                lr=0.00075,
                minibatch_size=250,
            )
        )
        settings = {
            "example": "rllib/tuned_examples/appo/cartpole_appo.py",
            "fcnet_hiddens": [32],
            "train_batch_size_per_learner": 1000,
            "vf_loss_coeff": 0.05,
            "entropy_coeff": 0.01,
            "num_epochs": 2,
            "lr": 0.00075,
            "minibatch_size": 250,
        }
    else:
        raise SystemExit(f"unknown --algo {algo}")
    config = (
        config.env_runners(num_env_runners=1, num_envs_per_env_runner=8)
        .reporting(metrics_num_episodes_for_smoothing=SOLVE_WINDOW)
        .debugging(seed=seed)
    )
    settings.update(num_env_runners=1, num_envs_per_env_runner=8)
    return config, settings


def main() -> None:
    """Train until solved or the cap; print the result line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=["ppo", "appo"], required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--cap", type=int, default=300_000)
    args = parser.parse_args()
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        EPISODE_RETURN_MEAN,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
    )

    log_dir = tempfile.mkdtemp(prefix="e2e-rllib-")
    register_env(ENV_NAME, make_env)
    ray.init(include_dashboard=False, log_to_driver=False)
    config, settings = build_config(args.algo, args.seed, log_dir)
    algo = config.build_algo()
    t_built = time.time()
    iterations: list[tuple[int, float, float | None]] = []  # RLlib's own view, per train()
    tracker = SolveTracker(args.target)
    seen = 0
    steps = 0
    noticed_unix: float | None = None
    while steps < args.cap and tracker.solved_unix is None:
        result = algo.train()
        now = time.time()
        env_res = result.get(ENV_RUNNER_RESULTS, {})
        steps = int(result.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, env_res.get(
            NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)))  # fmt: skip
        mean = env_res.get(EPISODE_RETURN_MEAN)
        iterations.append((steps, now, None if mean is None or mean != mean else float(mean)))
        episodes = read_episodes(log_dir)
        for t, ep_steps, ret in episodes[seen:]:
            if tracker.add(ret, ep_steps, now=t):
                noticed_unix = now  # when the driver (a user's stop rule) can see it
                break
        seen = len(episodes)
    end = time.time()
    stamps = [float(p.read_text()) for p in Path(log_dir).glob("first-*")]
    algo.stop()
    ray.shutdown()
    shutil.rmtree(log_dir, ignore_errors=True)
    emit(
        {
            "contender": f"rllib-{args.algo}",
            "ray_version": ray.__version__,
            "hyperparameters": settings,
            "script_start_unix": T_START,
            "imports_done_unix": T_IMPORTED,
            "algo_built_unix": t_built,
            "first_step_unix": min(stamps) if stamps else None,
            "solved_at_env_steps": tracker.solved_at_env_steps,
            # The episode that completed the criterion ended at solved_unix (env side); the
            # driver saw it when that train() call returned (noticed_unix).
            "solved_unix": tracker.solved_unix,
            "solved_noticed_unix": noticed_unix,
            "env_steps": steps,
            "end_unix": end,
            "episodes": tracker.episodes,
            "iterations": iterations,
            "curve": thin(tracker.curve),
        }
    )


if __name__ == "__main__":
    main()
