"""Whole-process cost of CURVE: `ppomq train --curve` against plain ZeroMQ, CartPole-v1 to 475.

    .venv/bin/python -m benchmarks.train_curve [--seeds 5] [--lock /tmp/ppomq-bench.lock]
        [--target 475] [--cap 500000] [--out benchmarks/results]

What CURVE (ZeroMQ encryption and authentication of the rollout and weights sockets, keys
made in RUN_DIR/keys) costs a user end to end. Each seed S in 0..N-1 gives a pair of runs of
the same command, once plain (`--no-curve`: ZeroMQ on loopback, unauthenticated) and once
with `--curve` (the default since the data plane is authenticated on loopback too):

    ppomq train --mode async --actors 2 --total-steps CAP --target-return 475
        --eval-episodes 0 --seed S --run-dir DIR --no-progress --curve|--no-curve

(--mode and --actors at ppomq's defaults, spelt out by benchmarks/e2e.py's command; torch
uses one thread per service process, as the services set it). The order alternates per
seed (plain first on even seeds, CURVE first on odd ones), so that a drift in the machine's
load hits both alike. Each run is timed by benchmarks/e2e.py's `run_one` (the clock from
just before the fork to the command's exit: what the user waits), each under an exclusive
flock of --lock held for that run only (other benchmarks and tests take the same lock).
From the run dir: summary.json's `solved_at_env_steps`, `solved_at_wall_s` (time to solve
on the learner's clock, from its start) and `sps`; the launcher's timeline (the run's
events) for start-up and shutdown. A run that reaches the --cap (500k env steps, both
alike) without solving is kept in the report, as unsolved; its pair is left out of the
ratios.

Figures: the median of the per-pair ratios CURVE / plain, for command-to-exit time, time
to solve and SPS, and the median (min–max) of each per arm. Machine load: the 1-min load
average before and after each run, and the CPU that other processes used while it ran.

Writes train_curve.json and train_curve.md to --out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import zmq

from benchmarks import e2e, harness
from benchmarks.e2e import (
    CONTENDED_CORES,
    Contender,
    RunRecord,
    _cell,
    run_one,
    stats,
)
from ppomq.core.settings import TrainSettings
from ppomq.core.timeline import read_timeline

PLAIN, CURVE = "plain", "curve"
LABELS = {PLAIN: "plain", CURVE: "CURVE"}
CAP = 500_000  # env steps, a run that has not solved by then stops (both arms alike)
TIMEOUT_S = 600.0
RATIO_KEYS = ("command_s", "solved_at_wall_s", "sps")
TORCH_THREADS = 1  # services/actor and services/learner: torch.set_num_threads(1)


def defaults() -> dict[str, Any]:
    """ppomq train's own defaults for what the command spells out."""
    f = TrainSettings.model_fields
    return {"mode": f["mode"].default, "actors": f["actors"].default}


def contender(arm: str, cap: int) -> Contender:
    d = defaults()
    return Contender(f"ppomq-{arm}", f"ppomq train ({LABELS[arm]})", "ppomq", cap, cap,
                     TIMEOUT_S, d["actors"], d["mode"])  # fmt: skip


@contextmanager
def _flag(extra: list[str]) -> Iterator[None]:
    """e2e.run_one builds a ppomq run's command with e2e.ppomq_command; append `extra`."""
    plain = e2e.ppomq_command

    def command(*args: Any, **kw: Any) -> list[str]:
        return [*plain(*args, **kw), *extra]

    e2e.ppomq_command = command
    try:
        yield
    finally:
        e2e.ppomq_command = plain


def measure(arm: str, seed: int, *, cap: int, target: float, workdir: Path,
            lock: str | None) -> dict[str, Any]:  # fmt: skip
    """One run, under the lock, and what its run dir says."""
    c = contender(arm, cap)
    with harness.BenchLock(lock), _flag(["--curve"] if arm == CURVE else ["--no-curve"]):
        rec: RunRecord = run_one(c, seed, cap=cap, target=target, workdir=workdir,
                                 rllib_python=None)  # fmt: skip
        load_after = harness.load1()
    run_dir = workdir / f"{c.name}-s{seed}"
    summary: dict[str, Any] = {}
    with suppress(OSError, ValueError):
        summary = json.loads((run_dir / "summary.json").read_text())
    tl = read_timeline(run_dir) or {}
    solved_wall = summary.get("solved_at_wall_s")
    return {
        "ok": rec.ok,
        "error": rec.error,
        "solved": rec.solved,
        "command_s": rec.command_s,
        "solved_at_env_steps": rec.steps_to_target,
        "solved_at_wall_s": None if solved_wall is None else round(float(solved_wall), 3),
        "command_to_solve_s": rec.wall_from_command_s,
        "env_steps": rec.env_steps,
        "sps": summary.get("sps"),
        "sps_first_step_to_solve": rec.sps,
        "startup_s": tl.get("startup_s"),
        "shutdown_s": tl.get("shutdown_s"),
        "keys_made": (run_dir / "keys" / "server.key").exists(),
        "load1_before": rec.load1_before,
        "load1_after": load_after,
        "foreign_cpu_cores": rec.foreign_cpu_cores,
        "peak_pss_mb": rec.peak_pss_mb,
        "command": rec.detail.get("command"),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def measure_pair(seed: int, *, cap: int, target: float, workdir: Path,
                 lock: str | None) -> dict[str, Any]:  # fmt: skip
    """Plain and CURVE on `seed`, plain first on even seeds."""
    order = [PLAIN, CURVE] if seed % 2 == 0 else [CURVE, PLAIN]
    runs = {arm: measure(arm, seed, cap=cap, target=target, workdir=workdir, lock=lock)
            for arm in order}  # fmt: skip
    ok = all(r["ok"] and r["solved"] for r in runs.values())
    a, b = runs[CURVE], runs[PLAIN]
    return {
        "seed": seed,
        "order": order,
        "ok": ok,
        "ratios": {k: _ratio(a[k], b[k]) if ok else None for k in RATIO_KEYS},
        "runs": runs,
    }


def _med(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


def summarise(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median per-pair ratios over the pairs both solved; per arm, stats of each figure
    over its solved runs (command time over all its runs that exited)."""
    ok = [p for p in pairs if p["ok"]]
    arms: dict[str, Any] = {}
    for arm in (PLAIN, CURVE):
        runs = [p["runs"][arm] for p in pairs]
        solved = [r for r in runs if r["ok"] and r["solved"]]
        figures = ("solved_at_wall_s", "solved_at_env_steps", "sps", "startup_s", "shutdown_s",
                   "peak_pss_mb")  # fmt: skip
        arms[arm] = {
            "runs": len(runs),
            "solved": len(solved),
            "command_s_solved": stats([r["command_s"] for r in solved]),
            "command_s_all": stats([r["command_s"] for r in runs]),
            **{k: stats([r[k] for r in solved]) for k in figures},
        }
    return {
        "pairs": len(pairs),
        "ok_pairs": len(ok),
        "median_pair_ratio": {k: _med([p["ratios"][k] for p in ok]) for k in RATIO_KEYS},
        "pair_ratio_range": {
            k: [min(v), max(v)] if (v := [p["ratios"][k] for p in ok]) else None for k in RATIO_KEYS
        },
        "arms": arms,
    }


def _busy(p: dict[str, Any]) -> bool:
    return any((r.get("foreign_cpu_cores") or 0) > CONTENDED_CORES for r in p["runs"].values())


def render_markdown(doc: dict[str, Any]) -> str:
    s, m, d = doc["summary"], doc["machine"], doc["defaults"]
    med, rng = s["median_pair_ratio"], s["pair_ratio_range"]
    a = s["arms"]

    def ratio(k: str) -> str:
        r = rng[k]
        return f"{med[k]}x" + (f" ({r[0]}–{r[1]})" if r else "")

    cmd = next((p["runs"][CURVE]["command"] for p in doc["pairs"] if p["runs"][CURVE]["command"]),
               "")  # fmt: skip
    lines = [
        "# Whole-process cost of CURVE: `ppomq train --curve` against plain ZeroMQ, CartPole-v1",
        "",
        f"`{doc['command']}` on {m['cpus']} CPUs ({m['platform']}, Python {m['python']}; "
        f"libzmq {m['libzmq']}, pyzmq {m['pyzmq']}), {doc['started_at']}. 1-min load average "
        f"before the runs: {doc['load1_before_runs']}, after: {doc['load1_after_runs']}; "
        + (
            f"each run held the shared bench lock ({doc['lock']}), but other users' processes "
            "may still have run."
            if doc["lock"]
            else "no bench lock was held."
        ),
        "",
        f"Each pair runs the same command on one seed, plain (`--no-curve`) and with `--curve` "
        "(the default; keys made in "
        "RUN_DIR/keys; rollout and weights sockets encrypted and authenticated), order "
        "alternating (plain first on even seeds); the clock runs from just before the fork to "
        f"the command's exit. ppomq's defaults: {d['mode']} mode, {d['actors']} actors, "
        f"{d['torch_threads']} torch thread per process. Stop at a mean of the last 20 "
        f"episodes >= {doc['target']:g}, or unsolved at {doc['cap']:,} env steps. The CURVE "
        f"command: `{cmd}`.",
        "",
        f"**Median per-pair ratio CURVE / plain (min–max), {s['ok_pairs']}/{s['pairs']} pairs "
        f"solved by both: command to exit {ratio('command_s')}; time to solve "
        f"(solved_at_wall_s) {ratio('solved_at_wall_s')}; SPS {ratio('sps')}.**",
        "",
        "| median (min–max) over solved runs | plain | CURVE |",
        "|---|---|---|",
        f"| solved | {a[PLAIN]['solved']}/{a[PLAIN]['runs']} | "
        f"{a[CURVE]['solved']}/{a[CURVE]['runs']} |",
    ]
    for key, label, fmt in (
        ("command_s_solved", "command to exit (s)", "{:.2f}"),
        ("solved_at_wall_s", "time to solve, learner clock (s)", "{:.2f}"),
        ("solved_at_env_steps", "env steps to solve", "{:,.0f}"),
        ("sps", "SPS (summary.json)", "{:,.0f}"),
        ("startup_s", "start-up: command to first env step (s)", "{:.2f}"),
        ("shutdown_s", "shutdown: last update to launcher stop (s)", "{:.2f}"),
        ("peak_pss_mb", "peak PSS, process tree (MB)", "{:,.0f}"),
    ):
        lines.append(f"| {label} | {_cell(a[PLAIN][key], fmt)} | {_cell(a[CURVE][key], fmt)} |")
    lines += [
        "",
        "| seed | order | command s plain / CURVE | ratio | solve s plain / CURVE | ratio | "
        "steps plain / CURVE | SPS plain / CURVE | SPS ratio | load before→after "
        "plain; CURVE | other procs' cores plain / CURVE |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in doc["pairs"]:
        rp, rc, r = p["runs"][PLAIN], p["runs"][CURVE], p["ratios"]
        lines.append(
            f"| {p['seed']} | {' then '.join(LABELS[o] for o in p['order'])} | "
            f"{rp['command_s']} / {rc['command_s']} | {r['command_s']} | "
            f"{rp['solved_at_wall_s']} / {rc['solved_at_wall_s']} | {r['solved_at_wall_s']} | "
            f"{rp['solved_at_env_steps']} / {rc['solved_at_env_steps']} | "
            f"{rp['sps']} / {rc['sps']} | {r['sps']} | "
            f"{rp['load1_before']}→{rp['load1_after']}; {rc['load1_before']}→{rc['load1_after']}"
            f" | {rp['foreign_cpu_cores']} / {rc['foreign_cpu_cores']} |"
        )
    busy = [p for p in doc["pairs"] if p["ok"] and _busy(p)]
    if busy:
        calm = [p for p in doc["pairs"] if p["ok"] and not _busy(p)]
        lines += [
            "",
            f"Other processes kept more than {CONTENDED_CORES} of a core busy (mean over the "
            f"run) during seed(s) {', '.join(str(p['seed']) for p in busy)}"
            + (
                f"; median ratios over the other {len(calm)} pair(s): command "
                f"{_med([p['ratios']['command_s'] for p in calm])}x, solve "
                f"{_med([p['ratios']['solved_at_wall_s'] for p in calm])}x, SPS "
                f"{_med([p['ratios']['sps'] for p in calm])}x."
                if calm
                else "."
            ),
        ]
    else:
        lines += ["", f"No run had other processes busy above {CONTENDED_CORES} of a core."]
    no_keys = [p["seed"] for p in doc["pairs"] if p["runs"][CURVE]["ok"]
               and not p["runs"][CURVE]["keys_made"]]  # fmt: skip
    if no_keys:
        lines += ["", f"**CURVE runs without RUN_DIR/keys (seeds {no_keys}): not CURVE.**"]
    if doc.get("note"):
        lines += ["", doc["note"]]
    failed = [p for p in doc["pairs"] if not p["ok"]]
    if failed:
        lines += ["", "Pairs left out of the ratios (a run failed or did not solve):", ""]
        for p in failed:
            why = "; ".join(
                f"{LABELS[k]}: {r['error'] or ('not solved in ' + str(r['env_steps']) + ' steps')}"
                for k, r in p["runs"].items()
                if not (r["ok"] and r["solved"])
            )
            lines.append(f"- seed {p['seed']}: {why}")
    lines.append("")
    return "\n".join(lines)


def _write(out: Path, doc: dict[str, Any], bench_run: harness.Run) -> str:
    return harness.write_results(out, "train_curve", doc, render_markdown(doc), bench_run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="pairs, on seeds 0..N-1")
    parser.add_argument("--target", type=float, default=475.0, help="mean return to reach")
    parser.add_argument("--cap", type=int, default=CAP, help="--total-steps, both arms")
    harness.add_lock_option(parser)
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    parser.add_argument("--workdir", type=Path, default=None, help="run dirs (default: temp)")
    parser.add_argument("--note", default=None, help="a line for the report")
    parser.add_argument("--render", type=Path, default=None, help="only re-render this JSON")
    args = parser.parse_args(argv)
    bench_run = harness.Run("train_curve", argv)
    if args.render is not None:
        doc = json.loads(args.render.read_text())
        if args.note:
            doc["note"] = args.note
        _write(args.out, doc, bench_run)
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ppomq-train-curve-"))
    workdir.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "benchmark": "train-curve",
        "command": harness.command_line("train_curve", argv),
        "started_at": harness.utc_now(),
        "complete": False,
        "target": args.target,
        "cap": args.cap,
        "lock": args.lock,
        "note": args.note,
        "defaults": {**defaults(), "torch_threads": TORCH_THREADS},
        "load1_before_runs": harness.load1(),
        "load1_after_runs": None,
        "machine": harness.machine(libzmq=zmq.zmq_version(), pyzmq=zmq.__version__),
        "summary": summarise([]),
        "pairs": [],
    }
    for seed in range(args.seeds):
        pair = measure_pair(seed, cap=args.cap, target=args.target, workdir=workdir,
                            lock=args.lock)  # fmt: skip
        doc["pairs"].append(pair)
        doc["summary"] = summarise(doc["pairs"])
        doc["load1_after_runs"] = harness.load1()
        _write(args.out, doc, bench_run)  # partial results survive an interrupted run
        r = pair["runs"]
        print(
            f"seed {seed}: plain {r[PLAIN]['command_s']} s (solve {r[PLAIN]['solved_at_wall_s']}"
            f" s), CURVE {r[CURVE]['command_s']} s (solve {r[CURVE]['solved_at_wall_s']} s), "
            f"ratios {pair['ratios']}" + ("" if pair["ok"] else " NOT OK"),
            flush=True,
        )
    doc["complete"] = True
    print(_write(args.out, doc, bench_run))
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if doc["summary"]["ok_pairs"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
