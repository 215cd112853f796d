"""Whole-system Atari on a machine with cores and a GPU: `ppomq train --preset atari` with
the C++ env backend, the learner on the GPU, and a fleet of actors.

    python -m benchmarks.device.atari_fleet --out DIR [--arms preset,fleet]
        [--batches-per-version 1] [--rounds 1] [--fleet-actors 14] [--duration-s 60]
        [--device cuda] [--deadline UNIX_TIME] [--workdir DIR] [--lock PATH]

Every run is one `ppomq train --preset atari --env-backend ale` (Breakout; embedded Redis,
weightserver, the learner on --device), stopped by --duration-s, one at a time:
  preset  the preset as it is: 2 actors x 4 envs x 128 steps, 1,024 samples per update
          (CleanRL's ppo_atari.py shape), minibatches of 256
  fleet   --fleet-actors actors x 8 envs x 128 steps, one batch per actor per update, 4
          minibatches per update (CleanRL's num_minibatches), as many cores as actors
each with every --batches-per-version given (the learner's flow control: 1, the preset's,
has an actor wait for a new version after each batch; 2 lets it sample its next batch
while the learner trains on the last), --rounds times, interleaved.

Figures per run, read back from the run dir (as benchmarks.learner_group reads them): SPS
over the whole run and steady SPS (after the first update past a quarter of the run's env
steps), the learner's time per update (wait for batches, SGD, publish), and the actors'
share of their own time (sampling against waiting for weights and sending, from the line
each actor logs at exit). The projection to 10M env steps is the run's start-up plus 10M
over the steady SPS, beside CleanRL's published times for ppo_atari.py on Breakout (10M
steps): ppo_atari.py about 600 SPS, 264-285 min; ppo_atari_envpool.py 151-183 min;
ppo_atari_envpool_xla_jax.py 34-53 min (https://docs.cleanrl.dev/rl-algorithms/ppo/). Runs
that would end past --deadline are skipped. Writes DIR/atari_fleet.{json,md}, rewritten
after every run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks import learner_group as lg

WORKDIR = harness.REPO / "runs" / "bench-atari-fleet"
TEN_M = 10_000_000
STEADY_FROM = 0.25
OVERHEAD_S = 40.0  # start-up and shutdown beyond --duration-s, for the deadline check
CLEANRL_MIN = {
    "ppo_atari.py (gymnasium envs, PyTorch)": (264, 285),
    "ppo_atari_envpool.py (EnvPool, PyTorch)": (151, 183),
    "ppo_atari_envpool_xla_jax.py (EnvPool, JAX)": (34, 53),
}
_ACTOR_TIME = re.compile(r"time: sample ([\d.]+)%, weights ([\d.]+)%, send ([\d.]+)%")


def arm_flags(arm: str, fleet_actors: int) -> list[str]:
    if arm == "preset":
        return ["--actors", "2"]
    if arm == "fleet":
        samples = fleet_actors * 8 * 128
        return ["--actors", str(fleet_actors), "--num-envs", "8",
                "--minibatch-size", str(samples // 4)]  # fmt: skip
    raise ValueError(f"unknown arm {arm!r}")


def train_argv(arm: str, bpv: int, args: argparse.Namespace, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "ppomq.cli", "train", "--preset", "atari",
        "--env-backend", "ale", "--device", args.device, *arm_flags(arm, args.fleet_actors),
        "--batches-per-version", str(bpv),
        "--total-steps", "0", "--duration-s", f"{args.duration_s:g}",
        "--eval-episodes", "0", "--no-progress", "--run-dir", str(run_dir),
    ]  # fmt: skip


def actor_share(run_dir: Path) -> dict[str, float] | None:
    """The median over actors of each one's split of its own time, from its exit line."""
    rows = []
    for log in sorted((run_dir / "logs").glob("actor-*.log")):
        found = _ACTOR_TIME.findall(log.read_text(errors="replace"))
        if found:
            rows.append([float(x) for x in found[-1]])
    if not rows:
        return None
    keys = ("sample", "weights", "send")
    return {k: round(statistics.median(r[i] for r in rows) / 100, 3) for i, k in enumerate(keys)}


def projection(rec: dict[str, Any]) -> float | None:
    """Minutes to 10M env steps at the run's steady SPS, its start-up included."""
    sps = rec.get("steady_sps")
    if not sps:
        return None
    return round(((rec.get("startup_s") or 0.0) + TEN_M / sps) / 60, 1)


def run_arm(arm: str, bpv: int, rnd: int, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = args.workdir / f"{arm}-bpv{bpv}-r{rnd}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    rec: dict[str, Any] = {"arm": arm, "batches_per_version": bpv, "round": rnd, "ok": False,
                           "run_dir": str(run_dir)}  # fmt: skip
    with harness.BenchLock(args.lock) as fl:
        proc = harness.run_command(train_argv(arm, bpv, args, run_dir), run_dir,
                                   args.duration_s + OVERHEAD_S + 60, env=None)  # fmt: skip
    rec["lock_wait_s"] = fl.waited_s
    t_cmd = proc.pop("t_cmd")
    rec.update(proc)
    if rec["error"] is None:
        try:
            rec.update(lg.collect(run_dir, t_cmd, STEADY_FROM))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            rec["error"] = f"could not read the results: {exc!r}"
            return rec
        rec.update(actor_share=actor_share(run_dir), minutes_to_10m=projection(rec), ok=True)
    else:
        err = run_dir / "stderr.txt"
        if err.exists():
            rec["stderr_tail"] = err.read_text(errors="replace")[-1500:]
    return rec


def _f(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if value is None else fmt.format(value)


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        "# Atari on the GPU machine: the whole system with a fleet of actors",
        "",
        f"`{m['command']}` on {harness.machine_line(m['machine'])}; load average "
        f"{m['load_before']} before, {m['load_after']} after; {m['date']}.",
        "",
        f"Each run: `ppomq train --preset atari --env-backend ale --device {m['device']}` "
        f"(Breakout), {m['duration_s']:g} s, no evaluation; one run per row. Steady SPS after "
        f"the first update past {STEADY_FROM:.0%} of the run's env steps; per update, the "
        "learner's means over those updates; actors = the median actor's own time: "
        "sampling / waiting for weights / sending. 10M projection = start-up + 10M / steady "
        "SPS.",
        "",
        "| arm | batches per version | actors x envs | samples per update | SPS, whole run "
        "| SPS, steady | per update, ms: wait / SGD / publish | actors: sample / weights / send "
        "| mean policy age | start-up s | 10M steps, min |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["runs"]:
        head = f"| {r['arm']} | {r.get('batches_per_version', 1)} "
        if not r.get("ok"):
            why = (r.get("error") or "failed").splitlines()[0][:160]
            lines.append(f"{head}| – | – | – | – | – | – | – | – | {why} |")
            continue
        u, a = r["update_ms"], r.get("actor_share")
        share = " / ".join(f"{a[k]:.0%}" for k in ("sample", "weights", "send")) if a else "–"
        lines.append(
            f"{head}| {r.get('actors')} x {r.get('num_envs', '–')} "
            f"| {_f(r['samples_per_update'])} | {_f(r['sps'])} | **{_f(r['steady_sps'])}** "
            f"| {u['wait']:.0f} / {u['sgd']:.0f} / {u['publish']:.1f} | {share} "
            f"| {_f(r.get('mean_policy_age'), '{:.2f}')} | {_f(r.get('startup_s'), '{:.1f}')} "
            f"| **{_f(r.get('minutes_to_10m'), '{:.1f}')}** |"
        )
    for s in doc.get("skipped", []):
        lines.append(f"| {s} | – | – | – | – | – | – | – | – | – | skipped: past the deadline |")
    lines += ["", "CleanRL's published wall time for Breakout, 10M steps (its docs):", ""]
    lines += [f"- {name}: {lo}–{hi} min" for name, (lo, hi) in CLEANRL_MIN.items()]
    lines += ["", "Commands:", ""] + [f"- `{r['command']}`" for r in doc["runs"] if "command" in r]
    return "\n".join(lines) + "\n"


def save(doc: dict[str, Any], out: Path, bench_run: harness.Run) -> None:
    doc["meta"].update(date=harness.utc_now(), load_after=harness.loadavg())
    harness.write_results(out, "atari_fleet", doc, markdown(doc), bench_run)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--arms", default="preset,fleet")
    p.add_argument("--batches-per-version", default="1", help="values, comma-separated")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--fleet-actors", type=int, default=14)
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--deadline", type=float, default=0.0, help="Unix time; 0: none")
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    harness.add_lock_option(p, default=harness.LOCK_PATH)
    args = p.parse_args(argv)
    bench_run = harness.Run("device.atari_fleet", argv)
    arms = [a for a in args.arms.split(",") if a]
    if bad := [a for a in arms if a not in ("preset", "fleet")]:
        p.error(f"--arms: unknown {bad}; choose from preset, fleet")
    doc: dict[str, Any] = {
        "benchmark": "atari_fleet",
        "meta": {
            "command": harness.command_line("device.atari_fleet", argv),
            "machine": harness.machine(),
            "load_before": harness.loadavg(),
            "duration_s": args.duration_s,
            "device": args.device,
            "fleet_actors": args.fleet_actors,
            "cleanrl_minutes_10m": CLEANRL_MIN,
        },
        "runs": [],
        "skipped": [],
    }
    try:
        bpvs = [int(v) for v in args.batches_per_version.split(",") if v]
    except ValueError:
        p.error(f"--batches-per-version: {args.batches_per_version!r} is not integers")
    plan = [(r, a, b) for r in range(args.rounds) for a in arms for b in bpvs]
    for i, (rnd, arm, bpv) in enumerate(plan, 1):
        name = f"{arm} bpv {bpv} round {rnd}"
        if args.deadline and time.time() + args.duration_s + OVERHEAD_S > args.deadline:
            doc["skipped"].append(name)
            print(f"[{i}/{len(plan)}] {name}: skipped, past the deadline", flush=True)
            continue
        rec = run_arm(arm, bpv, rnd, args)
        rec["num_envs"] = 4 if arm == "preset" else 8
        doc["runs"].append(rec)
        save(doc, args.out, bench_run)
        state = "ok" if rec["ok"] else f"FAILED: {rec['error']}"
        print(
            f"[{i}/{len(plan)}] {name}: {_f(rec.get('command_s'), '{:.1f}')} s, "
            f"{_f(rec.get('sps'))} SPS, steady {_f(rec.get('steady_sps'))}, 10M in "
            f"{_f(rec.get('minutes_to_10m'), '{:.1f}')} min: {state}",
            flush=True,
        )
    if not doc["runs"]:
        save(doc, args.out, bench_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
