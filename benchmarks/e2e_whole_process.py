"""Whole-process time to solve CartPole-v1: `ppomq train` against Stable-Baselines3 (zoo).

    .venv/bin/python -m benchmarks.e2e_whole_process [--seeds 7] [--lock /tmp/ppomq-bench.lock]
        [--contender ppomq-async-2] [--out benchmarks/results]

a user waits from the command's start until the prompt is back, so this times
exactly that for both (benchmarks/e2e.py's `run_one`: the command as a user starts it, the
clock from just before the fork to its exit): `ppomq train --target-return 475
--eval-episodes 0` and SB3's zoo runner, each stopping once the mean of the last 20
episodes reaches 475. Runs come in pairs on the same seed, the pair's order alternating
(ppomq first on even seeds, SB3 first on odd ones) so that a drift in the machine's load
hits both alike; the figure is the median of the per-pair ratios ppomq / SB3. For ppomq
the launcher's phase timeline (the run's events, ppomq.core.timeline) splits its time into
start-up (command to first env step), training, and shutdown (last update to exit).

With `--before-src DIR` each pair becomes a triple: the same `ppomq train` command once
more with PYTHONPATH=DIR, an older checkout's src/ whose services are linked in as
ppomq.actor, ppomq.learner and ppomq.weightserver (how pyproject maps them), e.g.

    git worktree add /tmp/before <commit> && cd /tmp/before/src/ppomq && \
      ln -s ../../services/actor actor && ln -s ../../services/learner learner && \
      ln -s ../../services/weightserver weightserver

so that before and after run on the same seeds under the same load. Its overhead comes from
its run dir (ppomq.core.timeline: first env step and last update from its events, or from
the actor logs and progress.csv of a checkout that wrote none).

Writes e2e_whole_process.json and .md to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.e2e import (
    CONTENDED_CORES,
    CONTENDERS,
    RunRecord,
    availability,
    run_one,
)
from ppomq.core.timeline import first_env_step_unix, last_update_unix, read_timeline

BASELINE = "sb3"
BEFORE = "before"
LABELS = {BASELINE: "SB3", BEFORE: "before"}
GOAL_RATIO = 0.5  # whole-process time at most half of SB3's
GOAL_OVERHEAD_S = 2.0  # start-up + shutdown under 2 s


def _med(values: list[float | None]) -> float | None:
    return harness.median(values, digits=3)


def _range(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    return f"{statistics.median(vals):.2f} ({min(vals):.2f}–{max(vals):.2f})"


def _overhead_to_prompt(rec: RunRecord, run_dir: Path) -> float | None:
    """What the user waited beyond training: the whole command less first env step to last
    update (the timeline's own overhead ends at the launcher's stop, before it prints the
    summary and its interpreter exits)."""
    first, last = first_env_step_unix(run_dir), last_update_unix(run_dir)
    if rec.command_s is None or first is None or last is None:
        return None
    return round(rec.command_s - (last - first), 3)


def measure_pair(
    name: str,
    seed: int,
    *,
    target: float,
    workdir: Path,
    lock: str | None,
    before_src: str | None = None,
) -> dict[str, Any]:
    """One ppomq run and one SB3 run on `seed` (and one of the older ppomq with
    `before_src`), the order rotating with the seed, each under the lock."""
    order = [name, BASELINE] + ([BEFORE] if before_src else [])
    shift = seed % len(order)
    order = order[shift:] + order[:shift]
    recs: dict[str, RunRecord] = {}
    timeline: dict[str, Any] | None = None
    before_overhead = None
    for who in order:
        c = CONTENDERS[name if who == BEFORE else who]
        where = workdir / "before" if who == BEFORE else workdir
        saved = os.environ.get("PYTHONPATH")
        if who == BEFORE:
            os.environ["PYTHONPATH"] = str(before_src)  # run_one passes our environment on
        try:
            with harness.BenchLock(lock):
                rec = run_one(c, seed, cap=c.cap, target=target, workdir=where,
                              rllib_python=None)  # fmt: skip
        finally:
            if who == BEFORE:
                os.environ.pop("PYTHONPATH", None)
                if saved is not None:
                    os.environ["PYTHONPATH"] = saved
        recs[who] = rec
        run_dir = where / f"{c.name}-s{seed}"
        if who == name:
            timeline = read_timeline(run_dir)
            if timeline is not None:
                timeline["overhead_to_prompt_s"] = _overhead_to_prompt(rec, run_dir)
        elif who == BEFORE:
            before_overhead = _overhead_to_prompt(rec, run_dir)
    a, b = recs[name], recs[BASELINE]
    ok = a.ok and b.ok and a.solved and b.solved
    old = recs.get(BEFORE)
    before = None
    if old is not None:
        old_ok = ok and old.ok and old.solved and old.command_s
        before = {
            "ratio": round(old.command_s / b.command_s, 3) if old_ok and b.command_s else None,
            "overhead_to_prompt_s": before_overhead,
        }
    return {
        "seed": seed,
        "order": order,
        "ok": ok,
        "errors": {k: r.error for k, r in recs.items() if r.error},
        "ratio": round(a.command_s / b.command_s, 3)
        if ok and a.command_s and b.command_s
        else None,
        "runs": {
            who: {
                "command_s": r.command_s,
                "solved": r.solved,
                "steps_to_target": r.steps_to_target,
                "startup_s": r.startup_s,
                "wall_from_first_step_s": r.wall_from_first_step_s,
                "load1_before": r.load1_before,
                "foreign_cpu_cores": r.foreign_cpu_cores,
                "command": r.detail.get("command"),
            }
            for who, r in recs.items()
        },
        "ppomq_timeline": timeline,
        "before": before,
    }


def summarise(pairs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    ok = [p for p in pairs if p["ok"]]
    tl = [p["ppomq_timeline"] or {} for p in ok]
    a = [p["runs"][name]["command_s"] for p in ok]
    b = [p["runs"][BASELINE]["command_s"] for p in ok]
    med_a, med_b = _med(a), _med(b)
    before = [p["before"] for p in ok if p.get("before")]
    return {
        "before": {
            "median_pair_ratio": _med([x["ratio"] for x in before]),
            "command_s": _med([p["runs"][BEFORE]["command_s"] for p in ok if BEFORE in p["runs"]]),
            "overhead_to_prompt_s": _med([x["overhead_to_prompt_s"] for x in before]),
        }
        if before
        else None,
        "pairs": len(pairs),
        "ok_pairs": len(ok),
        "median_pair_ratio": _med([p["ratio"] for p in ok]),
        "ratio_of_medians": round(med_a / med_b, 3) if med_a and med_b else None,
        "command_s": {name: med_a, BASELINE: med_b},
        "ppomq_startup_s": _med([t.get("startup_s") for t in tl]),
        "ppomq_shutdown_s": _med([t.get("shutdown_s") for t in tl]),
        "ppomq_overhead_s": _med([t.get("overhead_s") for t in tl]),
        "ppomq_overhead_to_prompt_s": _med([t.get("overhead_to_prompt_s") for t in tl]),
        "ppomq_phases_median_s": {
            k: _med([t.get(k) for t in tl])
            for k in (tl[0] if tl else {})
            if k not in ("startup_s", "shutdown_s", "overhead_s", "overhead_to_prompt_s")
        },
    }


def _busy(pair: dict[str, Any]) -> bool:
    return any((r.get("foreign_cpu_cores") or 0) > CONTENDED_CORES for r in pair["runs"].values())


def _contention_lines(doc: dict[str, Any]) -> list[str]:
    """Pairs during which other processes kept more than CONTENDED_CORES busy (the load
    average counts our own runs too, so this is the figure to trust), and the median
    ratio without them."""
    busy = [p for p in doc["pairs"] if p["ok"] and _busy(p)]
    if not busy:
        return [f"No run had other processes busy above {CONTENDED_CORES} of a core.", ""]
    calm = [p["ratio"] for p in doc["pairs"] if p["ok"] and not _busy(p)]
    parts = []
    for p in busy:
        cores = ", ".join(
            f"{LABELS.get(k, 'ppomq')} {r.get('foreign_cpu_cores')}" for k, r in p["runs"].items()
        )
        parts.append(f"seed {p['seed']} ({cores})")
    return [
        f"Other processes kept more than {CONTENDED_CORES} of a core busy (mean cores) "
        f"during: {'; '.join(parts)}. "
        + (
            f"Median ratio over the other {len(calm)} pairs: {_med(calm)}x."
            if calm
            else "No pair was free of them."
        ),
        "",
    ]


def render_markdown(doc: dict[str, Any]) -> str:
    s, name = doc["summary"], doc["contender"]
    ok = [p for p in doc["pairs"] if p["ok"]]
    lines = [
        "# Whole-process time to solve CartPole-v1: ppomq against SB3 (zoo)",
        "",
        f"`{doc['command']}` on {doc['machine']['cpus']} CPUs ({doc['machine']['platform']}, "
        f"Python {doc['machine']['python']}), {doc['started_at']}. "
        f"1-min load average before the runs: {doc['load1_before_runs']}, after: "
        f"{doc['load1_after_runs']}; each run held the shared bench lock "
        f"({doc['lock']}), but other users' processes may still have run.",
        "",
        f"Each pair runs `{CONTENDERS[name].label}` and SB3 on one seed, order alternating; "
        "time from the command's start to its exit, both stopping once the mean of the last "
        f"20 episodes reaches {doc['target']:g}. ppomq's command: "
        f"`{(ok[0]['runs'][name]['command'] if ok else '')}`.",
        "",
        f"**Median per-pair ratio ppomq / SB3: {s['median_pair_ratio']}x** "
        f"(goal <= {GOAL_RATIO}); ratio of the medians {s['ratio_of_medians']}x; "
        f"{s['ok_pairs']}/{s['pairs']} pairs solved by both.",
        "",
        *_contention_lines(doc),
        f"ppomq overhead (command start to first env step, plus last update to exit), "
        f"median: **{s['ppomq_overhead_s']} s** (start-up {s['ppomq_startup_s']} s, "
        f"shutdown {s['ppomq_shutdown_s']} s, to the launcher's stop; goal < {GOAL_OVERHEAD_S} "
        f"s); to the prompt (the whole command less first env step to last update): "
        f"**{s['ppomq_overhead_to_prompt_s']} s**.",
        "",
        "| seed | order | ppomq (s) | SB3 (s) | ratio | ppomq steps | SB3 steps | "
        "ppomq start-up / shutdown / to prompt (s) | load before (ppomq, SB3) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in doc["pairs"]:
        ra, rb, t = p["runs"][name], p["runs"][BASELINE], p["ppomq_timeline"] or {}
        lines.append(
            f"| {p['seed']} | {' then '.join(LABELS.get(o, 'ppomq') for o in p['order'])}"
            f" | {ra['command_s']} | {rb['command_s']} | {p['ratio']} | "
            f"{ra['steps_to_target']} | {rb['steps_to_target']} | "
            f"{t.get('startup_s')} / {t.get('shutdown_s')} / {t.get('overhead_to_prompt_s')} | "
            f"{ra['load1_before']}, {rb['load1_before']} |"
        )
    lines += [
        "",
        f"Over the {len(ok)} pairs, median (min–max): ppomq "
        f"{_range([p['runs'][name]['command_s'] for p in ok])} s, SB3 "
        f"{_range([p['runs'][BASELINE]['command_s'] for p in ok])} s.",
        "",
        "ppomq phases, median seconds from the command's start (logs/launcher.log):",
        "",
        "| phase | s |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in s["ppomq_phases_median_s"].items()]
    if s.get("before"):
        sb = s["before"]
        calm_before = [
            p["before"]["ratio"]
            for p in doc["pairs"]
            if p.get("before") and p["ok"] and not _busy(p)
        ]
        lines += [
            "",
            f"The same pairs with the older ppomq ({doc['before_src']}) as a third run: "
            f"median ratio to SB3 {sb['median_pair_ratio']}x"
            + (f" (without the pairs above: {_med(calm_before)}x)" if calm_before else "")
            + f", command {sb['command_s']} s, overhead to the prompt "
            f"{sb['overhead_to_prompt_s']} s.",
            "",
            "| seed | before (s) | ratio before | overhead to prompt before (s) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p['seed']} | {p['runs'][BEFORE]['command_s']} | {p['before']['ratio']} | "
            f"{p['before']['overhead_to_prompt_s']} |"
            for p in doc["pairs"]
            if p.get("before")
        ]
    if doc.get("note"):
        lines += ["", doc["note"]]
    failed = [p for p in doc["pairs"] if not p["ok"]]
    if failed:
        lines += ["", "Pairs left out (a run failed or did not solve):", ""]
        lines += [f"- seed {p['seed']}: {p['errors'] or 'not solved'}" for p in failed]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=7, help="pairs, on seeds 0..N-1")
    parser.add_argument("--contender", default="ppomq-async-2", help="the ppomq contender")
    parser.add_argument("--target", type=float, default=475.0)
    harness.add_lock_option(parser)
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    parser.add_argument(
        "--before-src", default=None, help="an older checkout's src/ to run as a third contender"
    )
    parser.add_argument("--note", default=None, help="a line for the report (how it was run)")
    parser.add_argument("--render", type=Path, default=None, help="only re-render this JSON")
    args = parser.parse_args(argv)
    bench_run = harness.Run("e2e_whole_process", argv)
    if args.render is not None:
        doc = json.loads(args.render.read_text())
        if args.note:
            doc["note"] = args.note
        harness.write_results(args.out, "e2e_whole_process", doc, render_markdown(doc), bench_run)
        return 0
    for who in (args.contender, BASELINE):
        why = availability(CONTENDERS[who], None)
        if why:
            parser.error(f"{who}: {why}")
    workdir = Path(tempfile.mkdtemp(prefix="ppomq-whole-"))
    started_at = harness.utc_now()
    load_before = harness.load1()
    pairs = []
    for seed in range(args.seeds):
        pair = measure_pair(args.contender, seed, target=args.target, workdir=workdir,
                            lock=args.lock, before_src=args.before_src)  # fmt: skip
        pairs.append(pair)
        r = pair["runs"]
        old = f", before {r[BEFORE]['command_s']} s" if BEFORE in r else ""
        print(
            f"seed {seed}: ppomq {r[args.contender]['command_s']} s, "
            f"SB3 {r[BASELINE]['command_s']} s, ratio {pair['ratio']}{old}",
            flush=True,
        )
    doc = {
        "benchmark": "e2e-whole-process",
        "command": harness.command_line("e2e_whole_process", argv),
        "started_at": started_at,
        "contender": args.contender,
        "target": args.target,
        "lock": args.lock,
        "before_src": args.before_src,
        "note": args.note,
        "load1_before_runs": load_before,
        "load1_after_runs": harness.load1(),
        "machine": harness.machine(),
        "goals": {"ratio_max": GOAL_RATIO, "overhead_s_max": GOAL_OVERHEAD_S},
        "summary": summarise(pairs, args.contender),
        "pairs": pairs,
    }
    print(
        harness.write_results(args.out, "e2e_whole_process", doc, render_markdown(doc), bench_run)
    )
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if doc["summary"]["ok_pairs"] else 1


if __name__ == "__main__":
    sys.exit(main())
