"""`ppomq status`: what a running learner reports: version, SPS, actors, rejects."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from ppomq.errors import NotFoundError


def _redis_url(args: argparse.Namespace) -> str:
    if args.run_dir:
        path = Path(args.run_dir) / "settings.json"
        if not path.exists():
            raise NotFoundError(f"{path} not found; is {args.run_dir} a `ppomq train` run dir?")
        return json.loads(path.read_text())["redis_url"]
    return args.redis_url or os.environ.get("PPOMQ_REDIS_URL", "redis://127.0.0.1:6379/0")


def read_status(redis: Any, run_id: str) -> dict[str, Any]:
    from ppomq.weightserver.keys import RunKeys

    keys = RunKeys(run_id)
    raw = redis.get(keys.stats)
    if raw is None:
        raise NotFoundError(
            f"no status for run {run_id!r}: no learner has reported; check --run-id"
        )
    status = json.loads(raw)
    now = time.time()
    actors = []
    for actor_id, doc in sorted(redis.hgetall(keys.actors).items()):
        a = json.loads(doc)
        actors.append(
            {
                "actor_id": actor_id.decode(),
                "last_seen_s_ago": round(now - a["last_seen"], 1),
                "policy_version": a["policy_version"],
                "policy_age": status["version"] - a["policy_version"],
                "batches": a["batches"],
                "env_steps": a["env_steps"],
            }
        )
    status["actors"] = actors
    status["status_age_s"] = round(now - status["updated_at"], 1)
    return status


def _run(args: argparse.Namespace) -> int:
    from ppomq.redis_util import connect_redis, redis_errors

    url = _redis_url(args)
    run_id = args.run_id or os.environ.get("PPOMQ_RUN_ID", "default")
    if args.run_dir and not args.run_id:
        run_id = json.loads((Path(args.run_dir) / "settings.json").read_text())["run_id"]
    redis = connect_redis(url)
    with redis_errors(url):
        status = read_status(redis, run_id)
    if args.json:
        print(json.dumps(status, sort_keys=True))
        return 0
    ret = status.get("mean_return_20")
    print(
        f"run {run_id}: version {status['version']}, {status['env_steps']:,} env steps, "
        f"{status['sps']:,.0f} SPS, return(20) {'n/a' if ret is None else f'{ret:.1f}'}, "
        f"mode {status['mode']} (max staleness {status['max_staleness']}), "
        f"updated {status['status_age_s']} s ago"
    )
    print(f"rejects by reason: {status['rejects'] or 'none'}")
    print(f"{'actor':<28}{'last seen':>11}{'policy v':>10}{'age':>5}{'batches':>9}")
    for a in status["actors"]:
        print(
            f"{a['actor_id']:<28}{a['last_seen_s_ago']:>9.1f} s{a['policy_version']:>10}"
            f"{a['policy_age']:>5}{a['batches']:>9}"
        )
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="show a running learner's version, SPS, actors and rejects",
        description="Reads what the learner reports to Redis: version, SPS, per-actor last "
        "seen and policy age, rejected batches by reason.",
    )
    p.add_argument("--redis-url", help="Redis URL [env PPOMQ_REDIS_URL]")
    p.add_argument("--run-id", help="run id [env PPOMQ_RUN_ID; default: default]")
    p.add_argument("--run-dir", help="a `ppomq train` run dir (reads its Redis URL and run id)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)
