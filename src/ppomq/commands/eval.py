"""`ppomq eval --run-dir DIR | --weights FILE`: greedy evaluation of trained weights."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ppomq.core.errors import NotFoundError, UsageError


def _run(args: argparse.Namespace) -> int:
    from ppomq.core.evaluate import evaluate_policy, load_weights_file

    if (args.run_dir is None) == (args.weights is None):
        raise UsageError("give exactly one of --run-dir DIR or --weights FILE")
    path = Path(args.weights) if args.weights else Path(args.run_dir) / "final_weights.pt"
    if args.run_dir and not Path(args.run_dir).is_dir():
        raise NotFoundError(f"run dir {args.run_dir} not found; check the path")
    policy, meta = load_weights_file(path)
    env_id = args.env_id or meta.get("env_id")
    if not env_id:
        raise UsageError(f"{path} does not name its env; pass --env-id")
    mean = evaluate_policy(policy, env_id, episodes=args.episodes, seed=args.seed)
    result = {
        "env_id": env_id,
        "episodes": args.episodes,
        "mean_return": mean,
        "version": meta.get("version"),
        "weights": str(path),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{env_id}: mean return {mean:.1f} over {args.episodes} greedy episodes "
            f"(version {meta.get('version')}, {path})"
        )
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
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)
