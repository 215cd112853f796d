"""Sample Factory 2's own MuJoCo example (sf_examples.mujoco) on a MuJoCo task, timed whole.

    .venv-sf/bin/python -m benchmarks.contenders.sf_mujoco --env-id HalfCheetah-v4 \\
        --total-steps 1000000 --seed 1 --run-dir DIR --eval-episodes 0

Its own venv, made by benchmarks/contenders/sf_setup.sh (sample-factory 2.1.1 needs
gymnasium < 1.0, whose MuJoCo tasks are -v4 only: HalfCheetah-v4, the same model, frame skip,
reward and termination as ppomq's HalfCheetah-v5; mujoco 3.14.0, ppomq's own pin). Run from
the repository root.

What runs: `sf_examples.mujoco.train_mujoco` as its main() runs it: its `parse_mujoco_cfg`
(SF's defaults, then the example's `mujoco_override_defaults`), then what `run_rl` does,
spelled out (sf_common.run_sf) only to attach a timing observer. Everything is the
example's: PPO in sync mode (async_rl False), 8 workers x 8 envs (worker_num_splits 2:
double-buffered sampling), rollout 64, batch_size 1024, num_batches_per_epoch 4, 2 epochs,
lr 2.95e-3 linear_decay, gamma 0.99, gae_lambda 0.95, clip 0.2, value loss 1.3,
max_grad_norm 3.5, a 64-64 tanh MLP encoder, normalize_input and normalize_returns, no RNN.
Changed: --env (the example's name for --env-id), --train_for_env_steps (MuJoCo has no frame
skip: env steps are agent steps), --seed, --device cpu, --train_dir DIR/train,
--with_wandb False (its default, spelled out); --num-workers / --num-envs-per-worker
override the example's 8 x 8 when asked. Torch threads: SF sets 1 in every process.

Episodes: every env instance is wrapped (outermost, around SF's make_mujoco_env) by a score
log that sums the env's own rewards over an episode (SF's normalize_returns acts in its
learner, not on what the env returns), rows `unix,agent_steps,score` per env instance,
merged after the run as sf_atari does (sf_common.merge_episodes). No greedy evaluation
(--eval-episodes must be 0): the comparison is the training return.
Writes DIR/result.json (mujoco_common.write_result); exits non-zero with one line if SF fails.
"""

from __future__ import annotations

import time

T_START = time.time()  # before the heavy imports: the harness times the whole process

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402

from benchmarks.contenders.mujoco_common import MEAN_WINDOW, write_result  # noqa: E402
from benchmarks.contenders.sf_common import (  # noqa: E402
    ScoreLog,
    jsonable,
    merge_episodes,
    read_env_logs,
    run_sf,
    versions,
)

EPISODE_DIR_VAR = "SF_MUJOCO_EPISODE_DIR"  # inherited by SF's spawned worker processes


class ReturnLog(ScoreLog):
    """ScoreLog scoring an episode by the sum of the env's rewards since its reset."""

    def __init__(self, env: gym.Env, path: Path) -> None:
        super().__init__(env, path)
        self.total = 0.0

    def reset(self, **kwargs: Any) -> Any:
        self.total = 0.0
        return self.env.reset(**kwargs)

    def score(self, reward: float, terminated: bool, truncated: bool, info: dict) -> float | None:
        self.total += float(reward)
        if not (terminated or truncated):
            return None
        total, self.total = self.total, 0.0
        return total


def make_scored_env(full_env_name: str, cfg: Any, env_config: Any, render_mode: Any = None) -> Any:
    """SF's own MuJoCo env factory, wrapped by ReturnLog (the factory SF's workers call)."""
    from sf_examples.mujoco.mujoco_utils import make_mujoco_env

    env = make_mujoco_env(full_env_name, cfg, env_config, render_mode=render_mode)
    worker = getattr(env_config, "worker_index", None) if env_config is not None else None
    index = getattr(env_config, "vector_index", None) if env_config is not None else None
    name = f"env-{os.getpid()}-{worker}-{index}-{id(env):x}.csv"
    return ReturnLog(env, Path(os.environ[EPISODE_DIR_VAR]) / name)


def sf_env_name(env_id: str) -> str:
    from sf_examples.mujoco.mujoco_utils import MUJOCO_ENVS

    for spec in MUJOCO_ENVS:
        if spec.env_id == env_id:
            return spec.name
    sys.exit(f"sf_mujoco: {env_id} is not one of sf_examples.mujoco's tasks (they are -v4)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="HalfCheetah-v4")
    p.add_argument("--total-steps", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--eval-episodes", type=int, default=0, help="must be 0: no evaluation")
    p.add_argument("--num-workers", type=int, help="default: the example's (8)")
    p.add_argument("--num-envs-per-worker", type=int, help="default: the example's (8)")
    args = p.parse_args()
    if args.eval_episodes != 0:
        sys.exit("sf_mujoco: --eval-episodes must be 0 (the comparison is the training return)")

    run_dir = Path(args.run_dir).resolve()
    episode_dir = run_dir / "episodes"
    episode_dir.mkdir(parents=True, exist_ok=True)
    os.environ[EPISODE_DIR_VAR] = str(episode_dir)

    from sample_factory.envs.env_utils import register_env
    from sf_examples.mujoco.train_mujoco import parse_mujoco_cfg

    # The factory must pickle by its module name (SF sends its env registry to spawned
    # processes), not as __main__.make_scored_env.
    from benchmarks.contenders import sf_mujoco

    env_name = sf_env_name(args.env_id)
    register_env(env_name, sf_mujoco.make_scored_env)
    changed: dict[str, Any] = {
        "env": env_name,
        "experiment": f"sf_{env_name}",
        "train_dir": str(run_dir / "train"),
        "train_for_env_steps": args.total_steps,
        "seed": args.seed,
        "device": "cpu",
        "with_wandb": False,
    }
    if args.num_workers:
        changed["num_workers"] = args.num_workers
    if args.num_envs_per_worker:
        changed["num_envs_per_worker"] = args.num_envs_per_worker
    cfg = parse_mujoco_cfg([f"--{k}={v}" for k, v in changed.items()])
    marks = run_sf(cfg, "sf_mujoco")

    logs = read_env_logs(episode_dir)
    if not logs:
        sys.exit(f"sf_mujoco: no env logged a step under {episode_dir}")
    episodes = merge_episodes(logs)
    hyper = jsonable(cfg)
    hyper["changed_from_example"] = changed
    path = write_result(
        run_dir,
        {
            "contender": "sf",
            "env_id": args.env_id,
            "versions": versions("sample-factory", "torch", "gymnasium", "mujoco", "numpy"),
            "hyperparameters": hyper,
            "torch_threads": 1,
            "script_start_unix": T_START,
            "first_step_unix": min(rows[0][0] for rows in logs),
            "train_start_unix": marks.get("train_start_unix"),
            "train_end_unix": marks["train_end_unix"],
            "end_unix": time.time(),
            "env_steps": marks["sf_env_steps"],
            "env_steps_simulated": sum(rows[-1][1] for rows in logs),
            "episodes": episodes.rows,
            "mean_return_20": episodes.mean_last(MEAN_WINDOW),
            "eval_returns": [],
            "eval_return": None,
        },
    )
    print(f"sf_mujoco: {len(episodes.rows)} episodes, result {path}", flush=True)


if __name__ == "__main__":
    main()
