"""Sample Factory 2's own Atari example (sf_examples.atari) on an Atari game, timed whole.

    .venv-sf/bin/python -m benchmarks.contenders.sf_atari --env-id BreakoutNoFrameskip-v4 \\
        --total-steps 1000000 --seed 1 --run-dir DIR --eval-episodes 0

Its own venv, made by benchmarks/contenders/sf_setup.sh (sample-factory 2.1.1 needs
gymnasium < 1.0 and numpy < 2). Run from the repository root.

What runs: SF's Atari example as `sf_examples.atari.train_atari.main` runs it: its
`parse_atari_args` (SF's defaults, then the example's `atari_override_defaults`), then what
`run_rl` does (make_runner, init, run), spelled out here only to attach a timing observer.
Its env factory is SF's own `make_atari_env` (NoopReset 30, MaxAndSkip 4, EpisodicLife,
FireReset, ClipReward, 84x84 grey, 4-frame stack, RecordEpisodeStatistics innermost: the
CleanRL/SB3 preprocessing), registered under the example's own name for the game
(`atari_breakout` for BreakoutNoFrameskip-v4) and wrapped once more, outermost, to log scores.
Everything else is the example's: PPO, sync mode (async_rl False), rollout 128,
batch_size 256, num_batches_per_epoch 4, num_epochs 4, lr 2.5e-4 linear_decay, gamma 0.99,
gae_lambda 0.95, clip 0.1, entropy 0.01, value loss 0.5, max_grad_norm 0.5, adam_eps 1e-5,
convnet_atari encoder, relu, obs_scale 255, normalize_input and normalize_returns True,
no RNN. Only these are changed:
- --env: the example's name for --env-id;
- --train_for_env_steps: SF counts env steps in frames when summaries_use_frameskip is on,
  and the example turns it on (with env_frameskip 4): SF's learner adds
  experience_size * frameskip per batch and stops once that exceeds train_for_env_steps. So
  the runner passes --total-steps * 4: 1M agent steps = 4M frames, the same budget as ppomq,
  SB3 and CleanRL. (SF's linear_decay counts its horizon as train_for_env_steps // batch_size
  * num_epochs minibatch steps, i.e. in frames too, so within 4M frames its learning rate
  only decays to 3/4 of 2.5e-4: that is the example's own behaviour, kept.)
  SF stops at the first training iteration past the budget: 1024 agent steps a time, so
  1M asked gives 1,000,448 agent steps;
- --seed, --device cpu, --train_dir DIR/train (--experiment sf_<game>), --with_wandb False
  (SF's default, spelled out); no video is recorded in training;
- workers: the example asks for num_workers 8 x num_envs_per_worker 1, made for a many-core
  machine. SF's own default for num_workers is the number of CPUs (multiprocessing.cpu_count,
  sample_factory/cfg/cfg.py), and one rollout worker per core is its rule for CPU sampling;
  on a 2-core machine that is num_workers 2. To keep the example's algorithm unchanged
  (8 envs, 8 x 128 = 1024 samples per training iteration = batch_size 256 x 4 minibatches,
  which SF's sync mode requires to match exactly) each worker steps 4 envs:
  --num_workers 2 --num_envs_per_worker 4 (worker_num_splits stays 1, the example's).
  --num-workers / --num-envs-per-worker override them (their product must stay 8).
Torch threads: SF sets torch.set_num_threads(1) in its learner, inference and rollout
processes (init_torch_runtime; rollout workers also limit BLAS to 1 thread); the result
records 1.

Episodes and scores: every env instance is wrapped (outermost, around SF's make_atari_env)
by `ScoreLog`, which reads the `episode` info of the RecordEpisodeStatistics wrapper that
SF's factory puts innermost, on the raw NoFrameskip env: its `r` is the raw game score
(points, not clipped rewards) of a whole game over all 5 lives (EpisodicLifeEnv only ends
episodes for the learner; the inner env is reset, and the score reset, only at game over).
Since SF runs envs in separate (spawned) processes, each env appends rows
`unix,agent_steps,score` to its own file DIR/episodes/env-<pid>-<worker>-<index>.csv
(line-buffered): one row at its first step, one every 1000 of its agent steps (score
empty), one at each game over. agent_steps counts the wrapper's step() calls, i.e. agent
steps (each 4 frames). After training the runner merges the files: an episode's env_steps is
the sum over all env instances of their agent-step counts at the episode's time, each
interpolated linearly between its rows (exact for the env that finished, within ~1000
steps per other env). That counts steps simulated (as SB3's and CleanRL's global step do),
which run ahead of the steps trained on by the rollouts in flight (1-2k steps in trials).
env_steps in the result is SF's own count of steps trained on (its learner's env_steps /
4); env_steps_simulated the files' total.
Times: script_start_unix before the heavy imports; first_step_unix the earliest first-step
row (the first env step of any worker); train_end_unix when SF's runner stops training
(AlgoObserver.on_stop, after the last training iteration, before its final checkpoint save
and process shutdown); end_unix when the result is written. No evaluation (--eval-episodes
must be 0): eval_returns [] and eval_return None.
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

from benchmarks.contenders.mujoco_common import MEAN_WINDOW, write_result  # noqa: E402
from benchmarks.contenders.sf_common import (  # noqa: E402
    ScoreLog,
    jsonable,
    merge_episodes,
    read_env_logs,
    run_sf,
    versions,
)

EPISODE_DIR_VAR = "SF_ATARI_EPISODE_DIR"  # inherited by SF's spawned worker processes
TOTAL_ENVS = 8  # the example's num_workers 8 x num_envs_per_worker 1
DEFAULT_WORKERS = 2  # one rollout worker per core on the 2-core benchmark machine


def make_scored_env(full_env_name: str, cfg: Any, env_config: Any, render_mode: Any = None) -> Any:
    """SF's own Atari env factory, wrapped by ScoreLog (the env factory SF's workers call)."""
    import ale_py  # noqa: F401  (ale-py 0.9 registers the ...NoFrameskip-v4 ids on import)
    from sf_examples.atari.atari_utils import make_atari_env

    env = make_atari_env(full_env_name, cfg, env_config, render_mode=render_mode)
    worker = getattr(env_config, "worker_index", None) if env_config is not None else None
    index = getattr(env_config, "vector_index", None) if env_config is not None else None
    name = f"env-{os.getpid()}-{worker}-{index}-{id(env):x}.csv"
    return ScoreLog(env, Path(os.environ[EPISODE_DIR_VAR]) / name)


def sf_env_name(env_id: str) -> str:
    from sf_examples.atari.atari_utils import ATARI_ENVS

    for spec in ATARI_ENVS:
        if spec.env_id == env_id:
            return spec.name
    sys.exit(f"sf_atari: {env_id} is not one of sf_examples.atari's games")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="BreakoutNoFrameskip-v4")
    p.add_argument("--total-steps", type=int, default=1_000_000, help="agent steps (4 frames each)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--eval-episodes", type=int, default=0, help="must be 0: no Atari evaluation")
    p.add_argument("--num-workers", type=int, default=DEFAULT_WORKERS)
    p.add_argument("--num-envs-per-worker", type=int, default=None, help="default: 8 / workers")
    args = p.parse_args()
    if args.eval_episodes != 0:
        sys.exit("sf_atari: --eval-episodes must be 0 (no evaluation for Atari)")
    envs_per_worker = args.num_envs_per_worker or TOTAL_ENVS // args.num_workers

    run_dir = Path(args.run_dir).resolve()
    episode_dir = run_dir / "episodes"
    episode_dir.mkdir(parents=True, exist_ok=True)
    os.environ[EPISODE_DIR_VAR] = str(episode_dir)

    import ale_py  # noqa: F401  (registers the Atari ids in this process too)
    from sample_factory.envs.env_utils import register_env
    from sf_examples.atari.train_atari import parse_atari_args

    # The factory must pickle by its module name (SF sends its env registry to spawned
    # processes), not as __main__.make_scored_env.
    from benchmarks.contenders import sf_atari

    env_name = sf_env_name(args.env_id)
    register_env(env_name, sf_atari.make_scored_env)

    common = [f"--env={env_name}", f"--experiment=sf_{env_name}", "--device=cpu"]
    defaults = parse_atari_args(common)  # the example's settings, to read its frame skip
    per_step = defaults.env_frameskip if defaults.summaries_use_frameskip else 1
    changed = {
        "env": env_name,
        "experiment": f"sf_{env_name}",
        "train_dir": str(run_dir / "train"),
        "train_for_env_steps": args.total_steps * per_step,
        "seed": args.seed,
        "device": "cpu",
        "num_workers": args.num_workers,
        "num_envs_per_worker": envs_per_worker,
        "with_wandb": False,
    }
    cfg = parse_atari_args([f"--{k}={v}" for k, v in changed.items()])

    marks = run_sf(cfg, "sf_atari")

    logs = read_env_logs(episode_dir)
    if not logs:
        sys.exit(f"sf_atari: no env logged a step under {episode_dir}")
    episodes = merge_episodes(logs)
    first_step = min(rows[0][0] for rows in logs)
    simulated = sum(rows[-1][1] for rows in logs)
    hyper = jsonable(cfg)
    hyper["changed_from_example"] = changed
    hyper["env_id"] = args.env_id
    path = write_result(
        run_dir,
        {
            "contender": "sf",
            "env_id": args.env_id,
            "versions": versions("sample-factory", "torch", "gymnasium", "ale-py", "numpy"),
            "hyperparameters": hyper,
            "torch_threads": 1,
            "script_start_unix": T_START,
            "first_step_unix": first_step,
            "train_start_unix": marks.get("train_start_unix"),
            "train_end_unix": marks["train_end_unix"],
            "end_unix": time.time(),
            "env_steps": marks["sf_env_steps"] // per_step,
            "env_steps_simulated": simulated,
            "sf_env_steps_frames": marks["sf_env_steps"],
            "episodes": episodes.rows,
            "mean_return_20": episodes.mean_last(MEAN_WINDOW),
            "eval_returns": [],
            "eval_return": None,
        },
    )
    print(f"sf_atari: {len(episodes.rows)} episodes, result {path}", flush=True)


if __name__ == "__main__":
    main()
