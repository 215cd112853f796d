"""Scaling with the shipped deployment settings: N actor hosts (network namespaces) against
one learner, each service with exactly the env of docker-compose.yml (or of the rendered
k8s overlay), on an I/O-bound env. Needs root and `ip netns`.

    sudo .venv/bin/python -m benchmarks.scaling_netns [--actors 1,2,4,8] [--modes async,sync]
        [--sources compose] [--updates 15]

Each point is one fresh topology (benchmarks/deploy/netns_scaling.py): Redis, weightserver,
learner and N actor hosts, started in compose's order with their compose (or k8s) env,
changed only in the env id (benchmarks/envs.py's SleepEnv, 2 ms per step), the mode and the
run length. Measured over `--updates` learner updates once every actor host has delivered
batches: samples per update (N × one actor's batch is the target), env steps/s reaching
the learner, samples/s it trains on, and waste = batches rejected / batches taken off the
queue, in that window and over the whole run (start-up included).
Writes benchmarks/results/scaling_netns.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.deploy.netns import open_lab
from benchmarks.deploy.netns_scaling import STEP_S, measure, why_not


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        "# Scaling across network hosts, with the shipped settings",
        "",
        f"`{m['command']}` on {harness.machine_line(m['machine'])}; load average (1/5/15 min) "
        f"{m['loadavg_before']} before, {m['loadavg_after']} after. Each row: one fresh "
        "topology, every service on its own network namespace with exactly the env of "
        f"{' / '.join(m['sources'])} (changed only in env id = SleepEnv, {m['step_ms']:g} ms "
        f"per step, mode and run length); {m['updates']} learner updates measured once every "
        "actor host had delivered. One actor's batch = num_envs × num_steps = "
        f"{m['actor_batch_samples']} samples. Waste = batches rejected / batches taken off "
        "the learner's queue (window; whole run incl. start-up).",
        "",
        "| source | mode | N actor hosts | samples/update (target N×batch) | env steps/s "
        "| trained samples/s | speedup vs N=1 | updates/s | learner s/update: wait / train "
        "| waste window | waste run | start-up s | load 1m |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["points"]:
        want = r["actors"] * r["actor_batch_samples"]
        ok = all(s == want for s in r["samples_per_update"])
        ph = r["learner_s_per_update"]
        lines.append(
            f"| {r['source']} | {r['mode']} | {r['actors']} "
            f"| {r['samples_per_update_median']:,.0f} ({want:,}{'' if ok else ', not all'}) "
            f"| {r['env_steps_per_s']:,.0f} | {r['trained_samples_per_s']:,.0f} "
            f"| {r['speedup']:.2f} | {r['updates_per_s']:.2f} "
            f"| {ph['wait']:.2f} / {ph['targets'] + ph['sgd'] + ph['publish']:.2f} "
            f"| {r['window_waste']:.1%} | {r['run_waste_ratio']:.1%} "
            f"| {r['startup_s']:.0f} | {r['load_avg_1m_at_end']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--actors", default="1,2,4,8", help="actor host counts, comma-separated")
    p.add_argument("--modes", default="async,sync")
    p.add_argument("--sources", default="compose", help="compose, k8s or both")
    p.add_argument("--updates", type=int, default=15, help="updates measured per point")
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(p)
    args = p.parse_args(argv)
    bench_run = harness.Run("scaling_netns", argv)
    reason = why_not()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    counts = [int(n) for n in args.actors.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    load0 = harness.loadavg()
    points = []
    for source in sources:
        for mode in modes:
            base = None
            for n in counts:
                with (
                    harness.BenchLock(args.lock),
                    tempfile.TemporaryDirectory(prefix="ppomq-scale-netns-") as tmp,
                    open_lab(Path(tmp)) as lab,
                ):
                    r = measure(lab, Path(tmp), source=source, actors=n, mode=mode,
                                updates=args.updates)  # fmt: skip
                r.pop("env_changes")
                if base is None:
                    base = r["env_steps_per_s"] / n
                r["speedup"] = r["env_steps_per_s"] / base
                points.append(r)
                print(
                    f"{source} {mode} N={n}: samples/update {r['samples_per_update_median']:.0f}"
                    f", {r['env_steps_per_s']:,.0f} env steps/s, "
                    f"{r['trained_samples_per_s']:,.0f} trained samples/s, waste "
                    f"{r['window_waste']:.1%} (run {r['run_waste_ratio']:.1%})",
                    flush=True,
                )
    doc = {
        "meta": {
            "command": harness.command_line("scaling_netns", argv),
            "machine": harness.machine(),
            "date": harness.utc_now(),
            "sources": sources,
            "step_ms": STEP_S * 1000,
            "updates": args.updates,
            "actor_batch_samples": points[0]["actor_batch_samples"] if points else None,
            "loadavg_before": load0,
            "loadavg_after": harness.loadavg(),
        },
        "points": points,
    }
    print(harness.write_results(args.out, "scaling_netns", doc, markdown(doc), bench_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
