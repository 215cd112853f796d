"""`ppomq eval --run-dir DIR | --weights FILE`: greedy evaluation of trained weights."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ppomq.core.errors import NotFoundError, UsageError


def _run(args: argparse.Namespace) -> int:
    from ppomq.core.evaluate import evaluate_policy, load_weights_file
    from ppomq.core.evaluation_text import evaluation_words

    if (args.run_dir is None) == (args.weights is None):
        raise UsageError("give exactly one of --run-dir DIR or --weights FILE")
    path = Path(args.weights) if args.weights else Path(args.run_dir) / "final_weights.pt"
    if args.run_dir and not Path(args.run_dir).is_dir():
        raise NotFoundError(f"run dir {args.run_dir} not found; check the path")
    if args.run_dir and not path.exists():
        # The learner writes final_weights.pt as the run ends: a live run, or one stopped
        # before its learner wrote it, still has its newest versions in its Redis.
        raise NotFoundError(
            f"{args.run_dir} has no final_weights.pt yet (the run is still going, or stopped "
            f"before its end); evaluate its newest version with `ppomq weights export "
            f"--run-dir {args.run_dir} latest -o latest.pt` and `ppomq eval --weights latest.pt`"
        )
    policy, meta = load_weights_file(path)
    env_id = args.env_id or meta.get("env_id")
    if not env_id:
        raise UsageError(f"{path} does not name its env; pass --env-id")
    if args.episodes < 1:
        raise UsageError(f"--episodes {args.episodes}: give at least 1")
    ev = evaluate_policy(
        policy, env_id, episodes=args.episodes, seed=args.seed, time_limit_s=args.time_limit_s
    )
    result = {
        "env_id": env_id,
        "steps": ev.steps,
        "episodes": ev.episodes,
        "episodes_asked": ev.episodes_asked,
        "mean_return": ev.mean_return,
        "seconds": round(ev.seconds, 3),
        "cut_short": ev.cut_short,
        "version": meta.get("version"),
        "weights": str(path),
    }
    if args.json:
        print(json.dumps(result))
    else:
        words = evaluation_words(result, "--time-limit-s")
        print(f"{env_id}: mean return {words} (version {meta.get('version')}, {path})")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate trained weights greedily",
        description="Mean return over greedy episodes of a run's final weights "
        "(--run-dir) or of a weights file (--weights, e.g. from `ppomq weights export`).",
    )
    p.add_argument("--run-dir", help="a run dir holding final_weights.pt")
    p.add_argument("--weights", help="a .pt file from a run dir or `ppomq weights export`")
    p.add_argument("--env-id", help="override the env recorded with the weights")
    p.add_argument("--episodes", type=int, default=20, help="episodes (default 20)")
    p.add_argument("--seed", type=int, default=0, help="first episode seed (default 0)")
    p.add_argument(
        "--time-limit-s", type=float, default=0.0,
        help="stop after this many seconds; the mean is over the episodes finished by then "
        "(default 0: no limit)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)
