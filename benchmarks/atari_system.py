"""Whole-system Atari throughput: `ppomq train --preset atari` with 1, 2 and 4 actors.

    .venv/bin/python -m benchmarks.atari_system [--actors 1,2,4] [--torch-threads 1] \
        [--duration-s 45] [--repeats 2] [--lock /tmp/ppomq-bench.lock]

Each run is the command a user types: the atari preset (Breakout, 4 envs x 128 steps per
actor, one batch per actor per update, the Nature CNN), `--duration-s` long, no final
evaluation, timed from just before the fork to its exit. Read back from summary.json: env
steps per second over the learner's wall time (`sps`), versions, and where the learner's
time went (`learner_time_s`: waiting for data, SGD, publishing): a learner that waits little
is the bottleneck, one that waits much is starved by its actors. Runs are interleaved, the
actor counts' order rotating each repeat; the figure is the median over repeats.

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


def run_once(actors: int, threads: int, duration_s: float, workdir: Path) -> dict[str, Any]:
    run_dir = workdir / f"a{actors}-t{threads}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "ppomq.cli", "train", "--preset", "atari",
           "--actors", str(actors), "--torch-threads", str(threads),
           "--duration-s", f"{duration_s:g}", "--total-steps", "0", "--eval-episodes", "0",
           "--run-dir", str(run_dir), "--no-progress"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    load = harness.load1()
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
        "torch_threads": threads,
        "sps": s["sps"],
        "env_steps": s["total_env_steps"],
        "versions": s["versions"],
        "learner_wait_share": round(lt.get("wait", 0.0) / busy, 3),
        "sgd_s_per_update": round(lt.get("sgd", 0.0) / max(1, s["versions"]), 3),
        "command_s": round(command_s, 2),
        "load1_before": load,
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for actors in sorted({r["actors"] for r in runs}):
        mine = [r for r in runs if r["actors"] == actors]
        rows.append({
            "actors": actors,
            "runs": len(mine),
            "sps_median": round(statistics.median(r["sps"] for r in mine), 1),
            "sps_range": [min(r["sps"] for r in mine), max(r["sps"] for r in mine)],
            "learner_wait_share_median": statistics.median(
                r["learner_wait_share"] for r in mine
            ),
            "sgd_s_per_update_median": statistics.median(r["sgd_s_per_update"] for r in mine),
            "command_s_median": statistics.median(r["command_s"] for r in mine),
        })  # fmt: skip
    return rows


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "# Atari, the whole system: `ppomq train --preset atari` by actor count",
        "",
        f"`{doc['command']}` on {harness.machine_line(doc['machine'])}, {doc['date']}. Each run "
        f"{doc['duration_s']:g} s of "
        "Breakout (4 envs x 128 steps per actor, one batch per actor per update, the Nature "
        f"CNN), `--torch-threads {doc['torch_threads']}`, no final evaluation; median over "
        f"{doc['repeats']} interleaved repeats. SPS = env steps trained per second of the "
        "learner's wall time (summary.json); learner waiting = its share of time waiting "
        "for data.",
        "",
        "| actors | SPS (range) | learner waiting | SGD s per update | command to exit (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['actors']} | {r['sps_median']:,.0f} ({r['sps_range'][0]:,.0f}–"
            f"{r['sps_range'][1]:,.0f}) | {r['learner_wait_share_median']:.0%} | "
            f"{r['sgd_s_per_update_median']:.2f} | {r['command_s_median']:.1f} |"
        )
    lines += ["", "Every run:", "", "| actors | SPS | versions | learner waiting | load before |",
              "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in doc["runs"]:
        lines.append(
            f"| {r['actors']} | {r['sps']:,.0f} | {r['versions']} | "
            f"{r['learner_wait_share']:.0%} | {r['load1_before']} |"
        )
    return "\n".join(lines) + "\n"


def result_stem(torch_threads: int) -> str:
    """The results' file name: one per thread count, so that both stay current side by side."""
    return "atari_system" + (f"_threads{torch_threads}" if torch_threads != 1 else "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--actors", default="1,2,4")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--duration-s", type=float, default=45.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(p)
    args = p.parse_args(argv)
    counts = [int(a) for a in args.actors.split(",")]
    with tempfile.TemporaryDirectory(prefix="ppomq-atari-system-") as tmp:

        def run(actors: int, _repeat: int) -> dict[str, Any]:
            r = run_once(actors, args.torch_threads, args.duration_s, Path(tmp))
            print(json.dumps(r), flush=True)
            return r

        by_count = harness.interleave(counts, args.repeats, run, lock=args.lock)
    doc = {
        "benchmark": "atari_system",
        "command": harness.command_line("atari_system", argv),
        "machine": harness.machine(),
        "date": harness.utc_now(),
        "duration_s": args.duration_s,
        "torch_threads": args.torch_threads,
        "repeats": args.repeats,
        "runs": [r for runs in by_count.values() for r in runs],
    }
    doc["rows"] = summarise(doc["runs"])
    print(harness.write_results(args.out, result_stem(args.torch_threads), doc, markdown(doc)))


if __name__ == "__main__":
    main()
