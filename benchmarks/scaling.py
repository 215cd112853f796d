"""Scaling: speedup S(W) = throughput(W) / throughput(1) and efficiency E = S / W for
W = 1, 2, 4, 8, 16 actors, on an I/O-bound synthetic env and on CartPole (CPU-bound).

    .venv/bin/python -m benchmarks.scaling [--workers 1,2,4,8,16] [--repeats 2] [--quick]

Each point is a real `ppomq train --actors W` (embedded Redis, weightserver, learner, W
actor processes). Throughput is what reaches the learner's door: env steps in the batches
the learner takes off its queue (accepted or dropped as stale), per second, between two
learner status reports `--window-s` apart, after every actor has delivered batches and a
further `--settle-s` (start-up excluded: 16 actors importing torch on 2 cores take a while).

Why `--batches-per-version 0 --batch-samples W*N*T --update-epochs 1 --minibatch-size 0`:
the question is what the system can move, not how fast one SGD configuration trains. With
grants on, every actor waits for each new version, so throughput would be bounded by the
learner's update time (benchmarks/results/actor_efficiency.md shows that bound for the
defaults) and W would mostly measure the learner. With them off, actors never wait for
weights and the learner does one cheap SGD step per W batches, so its intake (receive,
decode, validate, queue) is what it contributes. Turning grants off needs a fixed update
size (`--batch-samples` > 0); W x N x T samples is one batch per actor, the update these
figures were first measured with. The learner's share of time spent waiting for data is
reported per run: near 1, it was not the bottleneck.

The synthetic env (benchmarks/envs.py) sleeps `--step-ms` per env step and does almost no
CPU work, so on this 2-core machine it measures coordination cost; CartPole measures the
CPU, whose ideal on C cores is min(W, C) (plus what the learner needs).
Writes benchmarks/results/scaling.{json,md,png}.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness, plot_style
from benchmarks.actor_efficiency import SystemRun, cpu_seconds, cpu_share
from benchmarks.envs import DEFAULT_STEP_S, SLEEP_ENV_SPEC, STEP_S_VAR

# The learner must not be the bottleneck (see the module docstring); with
# `update_flags(W, N, T)`'s fixed update size.
COMMON_FLAGS = ["--batches-per-version", "0", "--update-epochs", "1", "--minibatch-size", "0"]
ENVS = {
    # --target-return: the learner looks the solve threshold up by the bare id, which does
    # not know Gymnasium's "module:" prefix; a threshold given here skips that look-up
    # (and is never reached, so it never stops the run).
    "sleep": ["--env-id", SLEEP_ENV_SPEC, "--target-return", "1e9"],
    "cartpole": ["--env-id", "CartPole-v1"],
}  # fmt: skip
LABELS = {"sleep": "I/O-bound (SleepEnv)", "cartpole": "CPU-bound (CartPole-v1)"}


def update_flags(workers: int, num_envs: int, num_steps: int) -> list[str]:
    """Actors that never wait need a fixed update size: one batch per actor (W x N x T)."""
    return [*COMMON_FLAGS, "--batch-samples", str(workers * num_envs * num_steps)]


def window_rows(progress: Path, w0: float, w1: float) -> list[dict[str, str]]:
    """progress.csv rows of the updates that ended inside the learner-wall-time window."""
    if not progress.exists():
        return []
    with open(progress, newline="") as fh:
        return [r for r in csv.DictReader(fh) if w0 < float(r["wall_s"]) <= w1]


def measure(env: str, workers: int, args: argparse.Namespace, rep: int) -> dict[str, Any]:
    """One `ppomq train --actors W` and its steady-window throughput."""
    flags = [
        "--actors", str(workers), "--num-envs", str(args.num_envs),
        "--num-steps", str(args.num_steps), *ENVS[env],
        *update_flags(workers, args.num_envs, args.num_steps),
    ]  # fmt: skip
    run = SystemRun(args.workdir / f"{env}-w{workers}-r{rep}", flags)
    run.start(max_duration_s=args.start_timeout_s + args.settle_s + args.window_s + 60)
    t_start = time.monotonic()
    try:
        run.wait_until_producing(workers, min_batches=2, timeout_s=args.start_timeout_s)
        startup_s = time.monotonic() - t_start
        time.sleep(args.settle_s)
        pids = run.pids()
        s0 = run.fresh_status(time.time())
        cpu0 = cpu_seconds(pids)
        table0 = run.actor_table()
        time.sleep(args.window_s)
        s1 = run.fresh_status(time.time())
        cpu1 = cpu_seconds(pids)
        table1 = run.actor_table()
    finally:
        summary = run.stop()
    span = s1["updated_at"] - s0["updated_at"]
    steps = s1["env_steps"] - s0["env_steps"]
    per_actor = sorted(
        (table1[a]["env_steps"] - table0.get(a, {"env_steps": 0})["env_steps"]) / span
        for a in table1
    )
    rows = window_rows(run.run_dir / "progress.csv", s0["wall_s"], s1["wall_s"])
    phases = {
        p: sum(float(r[f"time/learner_{p}"] or 0) for r in rows)
        for p in ("wait", "targets", "sgd", "publish")
    }
    busy = sum(phases.values())
    cores = cpu_share(cpu0, cpu1, span)
    return {
        "env": env,
        "workers": workers,
        "repeat": rep,
        "sps": steps / span,
        "window_s": span,
        "env_steps_in_window": steps,
        "startup_s": round(startup_s, 2),
        "per_actor_sps_min_max": [per_actor[0], per_actor[-1]] if per_actor else None,
        "learner_wait_share": phases["wait"] / busy if busy else None,
        "learner_phase_s": {k: round(v, 3) for k, v in phases.items()},
        "cpu_cores": {
            "actors": round(sum(v for k, v in cores.items() if k.startswith("actor")), 3),
            **{k: v for k, v in cores.items() if not k.startswith("actor")},
        },
        "waste_ratio": (summary or {}).get("waste_ratio"),
    }


def summarize(points: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per env and W: median throughput, S against the median at W=1, E = S/W."""
    out: dict[str, list[dict[str, Any]]] = {}
    for env in dict.fromkeys(p["env"] for p in points):
        mine = [p for p in points if p["env"] == env]
        ws = sorted({p["workers"] for p in mine})
        med = {w: statistics.median(p["sps"] for p in mine if p["workers"] == w) for w in ws}
        base = med[ws[0]] / ws[0]  # per-actor throughput of the smallest W (1 by default)
        rows = []
        for w in ws:
            at = [p for p in mine if p["workers"] == w]
            s = med[w] / base
            # Per-run detail (CPU, per-actor rates) from the repeat nearest the median.
            rep = min(at, key=lambda p, m=med[w]: abs(p["sps"] - m))
            rows.append(
                {
                    "workers": w,
                    "sps": med[w],
                    "sps_min_max": [min(p["sps"] for p in at), max(p["sps"] for p in at)],
                    "speedup": s,
                    "efficiency": s / w,
                    "learner_wait_share": statistics.median(
                        p["learner_wait_share"] or 0.0 for p in at
                    ),
                    "cpu_cores": rep["cpu_cores"],
                    "per_actor_sps_min_max": rep["per_actor_sps_min_max"],
                    "startup_s": statistics.median(p["startup_s"] for p in at),
                    "waste_ratio": rep["waste_ratio"],
                }
            )
        out[env] = rows
    return out


@plot_style.styled
def plot(summary: dict[str, list[dict[str, Any]]], path: Path, cpus: int) -> None:
    fig, axes = plot_style.figure(1, 1, 5.5)
    ax = axes[0][0]
    wmax = max(r["workers"] for rows in summary.values() for r in rows)
    ax.plot([1, wmax], [1, wmax], "k--", lw=1, label="ideal (S = W)")
    for i, (env, rows) in enumerate(summary.items()):
        ws = [r["workers"] for r in rows]
        ax.plot(ws, [r["speedup"] for r in rows], "o-", label=LABELS.get(env, env))
        # The first env's labels above its points, the others' below: where two envs'
        # points meet (W=1, 2) their labels do not print over each other.
        offset = (-12, 7) if i == 0 else (5, -14)
        for r in rows:
            ax.annotate(f"E={r['efficiency']:.2f}", (r["workers"], r["speedup"]),
                        textcoords="offset points", xytext=offset, fontsize=10.5)  # fmt: skip
    ax.axhline(cpus, color="gray", lw=0.8, ls=":", label=f"{cpus} cores")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ticks = sorted({r["workers"] for rows in summary.values() for r in rows})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    lowest = min(r["speedup"] for rows in summary.values() for r in rows)
    yticks = [2.0**k for k in range(math.floor(math.log2(min(lowest, 1.0))), 0)] + ticks
    ax.set_yticks(yticks, [f"{t:g}" for t in yticks])
    ax.set_xlabel("actors W")
    ax.set_ylabel("speedup S (throughput / throughput at W=1)")
    ax.set_title("ppomq scaling: env steps/s reaching the learner")
    ax.grid(True, which="major", alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    plot_style.legend_below(fig, handles, ncols=min(4, len(handles)))
    plot_style.save(fig, path)


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        "# Scaling",
        "",
        f"`{m['command']}` on {harness.machine_line(m['machine'])}. Each point: one "
        f"`ppomq train --actors W` with N={m['num_envs']}, T={m['num_steps']}, "
        f"`{' '.join(COMMON_FLAGS)} --batch-samples W×N×T`; throughput = env steps "
        "reaching the learner per "
        f"second over a {m['window_s']:g} s window after all W actors were producing "
        f"(+{m['settle_s']:g} s); median (min–max) of {m['repeats']} interleaved "
        "repeat(s); per-actor rates and CPU from the repeat nearest the median. "
        f"SleepEnv sleeps {m['step_ms']:g} ms per env step.",
        "",
    ]
    for env, rows in doc["summary"].items():
        lines += [
            f"## {LABELS.get(env, env)}",
            "",
            "| W | env steps/s (min–max) | S | E = S/W | per-actor SPS (min–max) "
            "| learner waiting | CPU cores: actors / learner / weightserver / redis "
            "| start-up s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            c = r["cpu_cores"]
            pa = r["per_actor_sps_min_max"] or [0, 0]
            lo, hi = r["sps_min_max"]
            lines.append(
                f"| {r['workers']} | {r['sps']:,.0f} ({lo:,.0f}–{hi:,.0f}) | {r['speedup']:.2f} "
                f"| **{r['efficiency']:.2f}** | {pa[0]:,.0f}–{pa[1]:,.0f} "
                f"| {r['learner_wait_share']:.0%} "
                f"| {c.get('actors', 0):.2f} / {c.get('learner', 0):.2f} / "
                f"{c.get('weightserver', 0):.2f} / {c.get('redis', 0):.2f} "
                f"| {r['startup_s']:.1f} |"
            )
        lines.append("")
    lines.append("![speedup against actors](scaling.png)")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2,4,8,16", help="actor counts, comma-separated")
    p.add_argument("--envs", default="sleep,cartpole", help="sleep, cartpole or both")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--step-ms", type=float, default=DEFAULT_STEP_S * 1000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--window-s", type=float, default=6.0)
    p.add_argument("--settle-s", type=float, default=2.0)
    p.add_argument("--start-timeout-s", type=float, default=120.0)
    p.add_argument(
        "--quick", action="store_true", help="W=1,2, one repeat, 2 s windows (smoke test)"
    )
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument("--workdir", type=Path, default=None, help="run dirs (default: a temp dir)")
    harness.add_lock_option(p)
    args = p.parse_args(argv)
    if args.quick:
        args.workers, args.repeats, args.window_s, args.settle_s = "1,2", 1, 2.0, 0.5
    workers = [int(w) for w in args.workers.split(",")]
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    if any(e not in ENVS for e in envs):
        p.error(f"--envs: choose from {list(ENVS)}")
    # Read by benchmarks.envs when an actor imports it (children inherit the environment).
    os.environ[STEP_S_VAR] = str(args.step_ms / 1000)
    run_record = harness.Run("scaling", argv)
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ppomq-scaling-")
        args.workdir = Path(tmp.name)

    def run(point: tuple[int, str], rep: int) -> dict[str, Any]:
        w, env = point
        pt = measure(env, w, args, rep)
        print(
            f"{env:>8} W={w:<2} rep {rep}: {pt['sps']:9,.0f} env steps/s "
            f"(learner waiting {pt['learner_wait_share'] or 0:.0%}, "
            f"start-up {pt['startup_s']:.1f} s)",
            flush=True,
        )
        return pt

    try:
        # Interleaved: each repeat sweeps W, alternating envs, so that slow drifts of the
        # shared machine spread over every point rather than over one env or one W.
        grid = [(w, env) for w in workers for env in envs]
        by_point = harness.interleave(grid, args.repeats, run, order="fixed", lock=args.lock)
    finally:
        if tmp is not None:
            tmp.cleanup()
    points = [pt for pts in by_point.values() for pt in pts]
    doc = {
        "meta": {
            "command": harness.command_line("scaling", argv),
            "machine": harness.machine(),
            "date": harness.utc_now(),
            "num_envs": args.num_envs,
            "num_steps": args.num_steps,
            "step_ms": args.step_ms,
            "window_s": args.window_s,
            "settle_s": args.settle_s,
            "repeats": args.repeats,
            "flags": COMMON_FLAGS,
        },
        "summary": summarize(points),
        "points": points,
    }
    harness.write_json(args.out / "scaling.json", doc, run_record)
    plot(doc["summary"], args.out / "scaling.png", doc["meta"]["machine"]["cpus"])
    print(harness.write_markdown(args.out / "scaling.md", markdown(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
