"""Whole-system Atari throughput: `ppomq train --preset atari` with 1, 2 and 4 actors, by
env backend.

    .venv/bin/python -m benchmarks.atari_system [--actors 1,2,4] [--torch-threads 1] \
        [--env-backend gymnasium,ale] [--duration-s 45] [--repeats 2] \
        [--lock /tmp/ppomq-bench.lock]

Each run is the command a user types: the atari preset (Breakout, 4 envs x 128 steps per
actor, one batch per actor per update, the Nature CNN), `--duration-s` long, no final
evaluation, timed from just before the fork to its exit. Read back from summary.json: env
steps per second over the learner's wall time (`sps`), versions, and where the learner's
time went (`learner_time_s`: waiting for data, SGD, publishing; a learner that waits little
is the bottleneck, one that waits much is starved by its actors), and the median actor's
split of its own time (sampling, waiting for weights, sending) from the line each actor logs
at exit. `--env-backend` takes a list (gymnasium, ale, envpool): every actor count runs
with each backend within each repeat. Runs are interleaved, the (actors, backend) order
rotating each repeat; the figure is the median over repeats.

Writes benchmarks/results/atari_system.{json,md}; with `--torch-threads N` above 1,
atari_system_threadsN.{json,md}, so that the 1-thread and N-thread results sit side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.device.atari_fleet import actor_share

DEFAULT_BACKEND = "gymnasium"
BACKENDS = ("gymnasium", "ale", "envpool")


def run_once(
    actors: int, threads: int, duration_s: float, workdir: Path, backend: str = DEFAULT_BACKEND
) -> dict[str, Any]:
    run_dir = workdir / f"a{actors}-t{threads}-{backend}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "ppomq.cli", "train", "--preset", "atari",
           "--actors", str(actors), "--torch-threads", str(threads), "--env-backend", backend,
           "--duration-s", f"{duration_s:g}", "--total-steps", "0", "--eval-episodes", "0",
           "--run-dir", str(run_dir), "--no-progress"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    load = harness.load1()
    started = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration_s + 300)
    command_s = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} -> {done.returncode}: {done.stderr[-2000:]}")
    s = json.loads((run_dir / "summary.json").read_text())
    lt = s["learner_time_s"]
    busy = sum(lt.values()) or 1.0
    return {
        "actors": actors,
        "env_backend": backend,
        "torch_threads": threads,
        "sps": s["sps"],
        "env_steps": s["total_env_steps"],
        "versions": s["versions"],
        "learner_wait_share": round(lt.get("wait", 0.0) / busy, 3),
        "learner_sgd_share": round(lt.get("sgd", 0.0) / busy, 3),
        "sgd_s_per_update": round(lt.get("sgd", 0.0) / max(1, s["versions"]), 3),
        "actor_share": actor_share(run_dir),
        "command_s": round(command_s, 2),
        "load1_before": load,
        "started": round(started, 3),
    }


def backend_of(run: dict[str, Any]) -> str:
    """A run's env backend (results from before the option ran gymnasium)."""
    return run.get("env_backend", DEFAULT_BACKEND)


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (actors, env backend), in the order actors then backend as first run."""
    rows = []
    backends = list(dict.fromkeys(backend_of(r) for r in runs))
    for actors, backend in [(a, b) for a in sorted({r["actors"] for r in runs}) for b in backends]:
        mine = [r for r in runs if r["actors"] == actors and backend_of(r) == backend]
        if not mine:
            continue
        shares = [r["actor_share"] for r in mine if r.get("actor_share")]
        rows.append({
            "actors": actors,
            "env_backend": backend,
            "runs": len(mine),
            "sps_median": round(statistics.median(r["sps"] for r in mine), 1),
            "sps_range": [min(r["sps"] for r in mine), max(r["sps"] for r in mine)],
            "learner_wait_share_median": statistics.median(
                r["learner_wait_share"] for r in mine
            ),
            "learner_sgd_share_median": harness.median(
                r.get("learner_sgd_share") for r in mine
            ),
            "sgd_s_per_update_median": statistics.median(r["sgd_s_per_update"] for r in mine),
            "command_s_median": statistics.median(r["command_s"] for r in mine),
            "actor_share_median": {
                k: statistics.median(s[k] for s in shares) for k in ("sample", "weights", "send")
            } if shares else None,
        })  # fmt: skip
    return rows


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def _split(share: dict[str, float] | None) -> str:
    return "–" if not share else " / ".join(_pct(share[k]) for k in ("sample", "weights", "send"))


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "# Atari, the whole system: `ppomq train --preset atari` by actor count and env backend",
        "",
        f"`{doc['command']}` on {harness.machine_line(doc['machine'])}, {doc['date']}. Each run "
        f"{doc['duration_s']:g} s of "
        "Breakout (4 envs x 128 steps per actor, one batch per actor per update, the Nature "
        f"CNN), `--torch-threads {doc['torch_threads']}`, no final evaluation; median over "
        f"{doc['repeats']} interleaved repeats. SPS = env steps trained per second of the "
        "learner's wall time (summary.json); learner waiting / SGD = its share of time "
        "waiting for data / in the update; actors = the median actor's share of its own time "
        "sampling / waiting for weights / sending (its exit line). Env backend: gymnasium = "
        "Gymnasium's SyncVectorEnv over ppomq's Atari pipeline; ale = ale-py's C++ "
        "AtariVectorEnv (`--env-backend ale`).",
        "",
        "| actors | env backend | SPS (range) | learner waiting | learner SGD | SGD s per update "
        "| actors: sample / weights / send | command to exit (s) |",
        "|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['actors']} | {r.get('env_backend', DEFAULT_BACKEND)} | "
            f"{r['sps_median']:,.0f} ({r['sps_range'][0]:,.0f}–{r['sps_range'][1]:,.0f}) | "
            f"{_pct(r['learner_wait_share_median'])} | "
            f"{_pct(r.get('learner_sgd_share_median'))} | {r['sgd_s_per_update_median']:.2f} | "
            f"{_split(r.get('actor_share_median'))} | {r['command_s_median']:.1f} |"
        )
    lines += ["", "Every run, in the order run:", "",
              "| actors | env backend | SPS | versions | learner waiting | command to exit (s) "
              "| load before |", "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in doc["runs"]:
        lines.append(
            f"| {r['actors']} | {backend_of(r)} | {r['sps']:,.0f} | {r['versions']} | "
            f"{r['learner_wait_share']:.0%} | {r['command_s']:.1f} | {r['load1_before']} |"
        )
    return "\n".join(lines) + "\n"


def result_stem(torch_threads: int) -> str:
    """The results' file name: one per thread count, so that both stay current side by side."""
    return "atari_system" + (f"_threads{torch_threads}" if torch_threads != 1 else "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--actors", default="1,2,4")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--env-backend", default=DEFAULT_BACKEND,
                   help="a list, e.g. gymnasium,ale: each actor count runs with each backend "
                   "within each repeat")  # fmt: skip
    p.add_argument("--duration-s", type=float, default=45.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(p)
    args = p.parse_args(argv)
    bench_run = harness.Run("atari_system", argv)
    counts = [int(a) for a in args.actors.split(",")]
    backends = [b.strip() for b in args.env_backend.split(",") if b.strip()]
    if bad := [b for b in backends if b not in BACKENDS]:
        p.error(f"--env-backend {','.join(bad)}: choose from {', '.join(BACKENDS)}")
    with tempfile.TemporaryDirectory(prefix="ppomq-atari-system-") as tmp:

        def run(config: tuple[int, str], _repeat: int) -> dict[str, Any]:
            actors, backend = config
            r = run_once(actors, args.torch_threads, args.duration_s, Path(tmp), backend)
            print(json.dumps(r), flush=True)
            return r

        configs = [(a, b) for a in counts for b in backends]
        by_config = harness.interleave(configs, args.repeats, run, lock=args.lock)
    doc = {
        "benchmark": "atari_system",
        "command": harness.command_line("atari_system", argv),
        "machine": harness.machine(),
        "date": harness.utc_now(),
        "duration_s": args.duration_s,
        "torch_threads": args.torch_threads,
        "repeats": args.repeats,
        "env_backends": backends,
        # In the order they ran, so that the load column reads as a timeline.
        "runs": sorted(
            (r for runs in by_config.values() for r in runs), key=lambda r: r["started"]
        ),
    }
    doc["rows"] = summarise(doc["runs"])
    print(
        harness.write_results(
            args.out, result_stem(args.torch_threads), doc, markdown(doc), bench_run
        )
    )


if __name__ == "__main__":
    main()
