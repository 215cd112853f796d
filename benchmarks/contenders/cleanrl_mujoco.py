"""CleanRL's published ppo_continuous_action.py, run unmodified, plus a greedy evaluation.

    .venv-cleanrl/bin/python -m benchmarks.contenders.cleanrl_mujoco --env-id HalfCheetah-v4 \\
        --total-steps 1000000 --seed 1 --run-dir DIR

Which script: the one inside the `cleanrl==1.2.0` wheel from the package registry (its latest
release), installed into its own venv by cleanrl_setup.sh. It is executed as is, as
`__main__`, with its own defaults; only --env-id, --total-timesteps and --seed are passed,
plus --track False and --capture-video False, its defaults, spelled out because they
are the extras (wandb, videos) that must stay off. It still writes its TensorBoard events
under DIR/runs/, as every CleanRL user's run does.

Why that script and not a re-creation on gymnasium 1.x: the published source is the peer a
user would install. Its price is the env version: it speaks gymnasium 0.28's API (a list of
per-env `final_info` dicts, no autoreset mode), and gymnasium < 1.0 has the MuJoCo tasks as
-v4 only. So CleanRL runs HalfCheetah-v4 where the others run -v5; v5 changed no dynamics
of HalfCheetah (same model file, frame skip, reward and termination), so the figures compare.
The result records the env each contender ran.

What the script lacks, this runner adds around it without touching it:
- the per-episode curve: the script prints `global_step=N, episodic_return=[R]` for each
  finished episode; a tee on stdout timestamps those lines as they are printed;
- a 10-episode greedy evaluation after training (the published 1.2.0 script has none):
  actions are the policy mean, clipped to the bounds, on observations normalized with the
  training run's final, frozen statistics (clipped to +-10 as in training), on the seeds
  ppomq evaluates on (seed + 10_000 + i). Its time is inside the whole-process time, as
  ppomq's evaluation is in ppomq's.

Torch threads: 1 by default (--torch-threads N; 0: torch's default, as the published script
leaves them), recorded in the result: the best setting for a 64-64 network on CPU, the one
SB3's maintainers give (DLR-RM/stable-baselines3#283) and ppomq's learner and actors run.
Writes DIR/result.json (mujoco_common).
"""

from __future__ import annotations

import time

T_START = time.time()  # before the heavy imports: the harness times the whole process

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TextIO  # noqa: E402

from benchmarks.contenders.mujoco_common import (  # noqa: E402
    CLIP_OBS,
    EVAL_EPISODES,
    EVAL_SEED_OFFSET,
    EpisodeLog,
    write_result,
)

SCRIPT_MODULE = "cleanrl.ppo_continuous_action"
EPISODE_LINE = re.compile(r"global_step=(\d+), episodic_return=\[?\s*([-+0-9.eEinfa]+)")


class EpisodeTee(io.TextIOBase):
    """Passes stdout through and logs each `global_step=N, episodic_return=[R]` line with
    the time its newline arrives (print writes the text and the newline separately)."""

    def __init__(self, inner: TextIO, log: EpisodeLog) -> None:
        self.inner, self.log, self._partial = inner, log, ""

    def write(self, s: str) -> int:
        self.inner.write(s)
        self._partial += s
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            m = EPISODE_LINE.search(line)
            if m:
                self.log.add(int(m.group(1)), float(m.group(2)))
        return len(s)

    def flush(self) -> None:
        self.inner.flush()


def script_path() -> str:
    spec = importlib.util.find_spec(SCRIPT_MODULE)
    if spec is None or spec.origin is None:
        sys.exit(f"{SCRIPT_MODULE} not found: run benchmarks/contenders/cleanrl_setup.sh")
    return spec.origin


def run_script(path: str, env_id: str, total_steps: int, seed: int, log: EpisodeLog) -> dict:
    """Execute the script as `__main__` with its own argument parser; return its globals
    (the trained `agent`, the `envs` whose wrappers hold the normalization statistics)."""
    sys.argv = [
        path,
        "--env-id",
        env_id,
        "--total-timesteps",
        str(total_steps),
        "--seed",
        str(seed),
        "--track",
        "False",
        "--capture-video",
        "False",
    ]
    real_stdout = sys.stdout
    sys.stdout = EpisodeTee(real_stdout, log)
    try:
        return runpy.run_path(path, run_name="__main__")
    finally:
        sys.stdout = real_stdout


def obs_stats(envs: Any) -> tuple[Any, Any, float]:
    """The training env's NormalizeObservation statistics (mean, var, epsilon)."""
    import gymnasium as gym

    env = envs.envs[0]
    while not isinstance(env, gym.wrappers.NormalizeObservation):
        env = env.env  # AttributeError past the innermost env: the script changed
    return env.obs_rms.mean.copy(), env.obs_rms.var.copy(), float(env.epsilon)


def greedy_eval(agent: Any, envs: Any, env_id: str, episodes: int, seed: int) -> list[float]:
    """Returns of `episodes` greedy episodes with frozen observation normalization."""
    import gymnasium as gym
    import numpy as np
    import torch

    mean, var, eps = obs_stats(envs)
    env = gym.make(env_id)
    low, high = env.action_space.low, env.action_space.high
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET + ep)
        total, done = 0.0, False
        while not done:
            x = np.clip((obs - mean) / np.sqrt(var + eps), -CLIP_OBS, CLIP_OBS)
            with torch.no_grad():
                action = agent.actor_mean(torch.Tensor(x).unsqueeze(0))[0].numpy()
            obs, reward, terminated, truncated, _ = env.step(np.clip(action, low, high))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def versions() -> dict[str, str]:
    return {
        p: importlib.metadata.version(p)
        for p in ("cleanrl", "gymnasium", "mujoco", "torch", "numpy")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="HalfCheetah-v4")
    parser.add_argument("--total-steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--torch-threads", type=int, default=1, help="0: torch's default")
    args = parser.parse_args()
    run_dir = Path(args.run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(run_dir)  # the script writes runs/<name>/ (TensorBoard) under its cwd
    import torch

    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    path = script_path()
    log = EpisodeLog()
    g = run_script(path, args.env_id, args.total_steps, args.seed, log)
    train_end = time.time()
    eval_returns = greedy_eval(g["agent"], g["envs"], args.env_id, args.eval_episodes, args.seed)
    doc = {
        "contender": "cleanrl",
        "script": path,
        "env_id": args.env_id,
        "seed": args.seed,
        "versions": versions(),
        "hyperparameters": {k: v for k, v in vars(g["args"]).items()},
        "torch_threads": torch.get_num_threads(),
        "script_start_unix": T_START,
        "first_step_unix": g["start_time"],  # the script's own clock starts at reset
        "train_end_unix": train_end,
        "end_unix": time.time(),
        "env_steps": int(g["global_step"]),
        "episodes": log.rows,
        "mean_return_20": log.mean_last(),
        "eval_returns": eval_returns,
        "eval_return": sum(eval_returns) / len(eval_returns) if eval_returns else None,
    }
    print(f"result: {write_result(run_dir, doc)}", file=sys.stderr)


if __name__ == "__main__":
    main()
