"""The learner group's sweep over W learner ranks, for a machine with cores to spare.

    python -m benchmarks.device.group_sweep --out DIR [--learners 1,2,4,8]
        [--tasks cartpole,halfcheetah] [--actors 8] [--duration-s 15] [--cuda-reference]
        [--deadline UNIX_TIME] [--workdir DIR] [--lock PATH]

Every run is one `ppomq train --learners W --device cpu` (embedded Redis, weightserver, W
ranks with one torch thread each, gloo), stopped by --duration-s, one at a time, W
ascending within each task. Only W changes within a task: the same --actors (actor i
feeds rank i mod W, so each rank has actors / W of them) and the same total batch, which
each W splits into whole actor batches (a rank takes whole batches until it holds its
share):
  cartpole     CartPole-v1, the built-in PPO settings (20 epochs of 256-sample
               minibatches), actors of 4 envs x 32 steps, 1,024 samples per update
  halfcheetah  HalfCheetah-v5, `--preset mujoco` (10 epochs of 64-sample minibatches),
               actors of 1 env x 256 steps, 2,048 samples per update
--cuda-reference adds one learner on the GPU (`--learners 1 --device cuda`) per task:
what a GPU does for the same run, beside what W CPU ranks do.

Figures per run, read back from the run dir rank 0 writes (as benchmarks.learner_group
reads them): SPS over the whole run, steady SPS (env steps per learner second after the
first update past --steady-from of the run's env steps), per update the means over those
steady updates of wait (collecting the rank's batch, then agreeing with the others), SGD,
the collectives (communication: the all-reduces, waits for the slowest rank included,
timed inside SGD but for the sample count's, inside targets) and publish, and the whole
run's split of the learner's time (summary.json learner_time_s).
S = steady SPS at W / at W = 1, E = S / W. A run that would end past --deadline is not
started (it is listed as skipped), so the script that runs this keeps its time limit.
Without `--learners` in `ppomq train --help` nothing runs and the result says so.
Writes DIR/group_sweep.{json,md}, rewritten after every run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks import learner_group as lg

WORKDIR = harness.REPO / "runs" / "bench-group-sweep"
NEVER = ["--target-return", "1e9"]  # every run lasts --duration-s (CartPole would solve)
TASKS: dict[str, dict[str, Any]] = {
    "cartpole": {
        "label": "CartPole-v1",
        "env_id": "CartPole-v1",
        "flags": ["--preset", "none", "--num-envs", "4", "--num-steps", "32", *NEVER],
        "actor_batch": 4 * 32,
        "batch": 1024,
    },
    "halfcheetah": {
        "label": "HalfCheetah-v5, --preset mujoco",
        "env_id": "HalfCheetah-v5",
        "flags": ["--preset", "mujoco", "--num-envs", "1", "--num-steps", "256", *NEVER],
        "actor_batch": 256,
        "batch": 2048,
    },
}
# Start-up and shutdown of one `ppomq train` beyond --duration-s, the deadline check's
# allowance (about 11 s for W = 2 on a loaded 2-core machine).
OVERHEAD_S = 20.0
STEADY_FROM = 0.25
PHASES = lg.PHASES


@dataclass(frozen=True)
class Arm:
    task: str
    learners: int
    device: str

    @property
    def name(self) -> str:
        return f"{self.task}-W{self.learners}-{self.device}"


def check_shapes(tasks: list[str], learners: list[int], actors: int) -> str | None:
    """Why a W cannot have the same total batch and an equal share of actors per rank, or
    None: each rank needs as many actors as the others and a share of the batch that is a
    whole number of actor batches (else it takes one more and the total grows)."""
    for w in learners:
        if actors % w:
            return f"--actors {actors} does not split evenly over {w} learner ranks"
        for task in tasks:
            t = TASKS[task]
            share, per_actor = t["batch"] // w, t["actor_batch"]
            if t["batch"] % w or share % per_actor or share < per_actor:
                return (
                    f"{task}: {t['batch']} samples over {w} ranks is {t['batch'] / w:g} per "
                    f"rank, not a whole number of {per_actor}-sample actor batches"
                )
    return None


def plan(tasks: list[str], learners: list[int], cuda_reference: bool) -> list[Arm]:
    """Each task's W ascending (W = 1 first: the baseline is there if time runs out), the
    GPU references last."""
    arms = [Arm(task, w, "cpu") for task in tasks for w in learners]
    return arms + ([Arm(task, 1, "cuda") for task in tasks] if cuda_reference else [])


def train_argv(arm: Arm, actors: int, duration_s: float, run_dir: Path) -> list[str]:
    t = TASKS[arm.task]
    return [
        sys.executable, "-m", "ppomq.cli", "train", "--env-id", t["env_id"], *t["flags"],
        "--actors", str(actors), "--batch-samples", str(t["batch"]),
        "--total-steps", "0", "--duration-s", f"{duration_s:g}", "--seed", "1",
        "--learners", str(arm.learners), "--device", arm.device,
        "--eval-episodes", "0", "--no-progress", "--run-dir", str(run_dir),
    ]  # fmt: skip


def learners_flag() -> str | None:
    """None when `ppomq train` takes --learners, else why not."""
    try:
        res = subprocess.run(
            [sys.executable, "-m", "ppomq.cli", "train", "--help"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`ppomq train --help` did not run: {exc}"
    if "--learners" not in res.stdout:
        return "`ppomq train --help` has no --learners: this checkout has no learner group"
    return None


def time_split(learner_time_s: dict[str, float] | None) -> dict[str, float] | None:
    """The learner's whole-run seconds as shares: wait, compute (targets and SGD less the
    collectives, which the trainer times inside those two), communication (the
    collectives, waits for the slowest rank included) and publish."""
    if not learner_time_s:
        return None
    t = {p: float(learner_time_s.get(p) or 0.0) for p in PHASES}
    parts = {
        "wait": t["wait"],
        "compute": t["targets"] + t["sgd"] - t["allreduce"],
        "communication": t["allreduce"],
        "publish": t["publish"],
    }
    total = sum(parts.values())
    if total <= 0:
        return None
    return {k: round(v / total, 3) for k, v in parts.items()}


def run_arm(
    arm: Arm, actors: int, duration_s: float, workdir: Path, lock: str | None
) -> dict[str, Any]:
    run_dir = workdir / arm.name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    argv = train_argv(arm, actors, duration_s, run_dir)
    rec: dict[str, Any] = {"task": arm.task, "learners": arm.learners, "device": arm.device,
                           "actors": actors, "run_dir": str(run_dir), "ok": False}  # fmt: skip
    with harness.BenchLock(lock) as fl:
        proc = harness.run_command(argv, run_dir, duration_s + OVERHEAD_S + 60, env=None)
    rec["lock_wait_s"] = fl.waited_s
    t_cmd = proc.pop("t_cmd")
    rec.update(proc)
    if rec["error"] is None:
        try:
            got = lg.collect(run_dir, t_cmd, STEADY_FROM)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            rec["error"] = f"could not read the results: {exc!r}"
            return rec
        if got.get("learners") != arm.learners:
            rec["error"] = f"summary.json says {got.get('learners')} learners, not {arm.learners}"
            return rec
        rec.update(got, time_split=time_split(got.get("learner_time_s")), ok=True)
    return rec


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def ratios(runs: list[dict[str, Any]]) -> None:
    """S and E in place: each ok run's steady and whole-run SPS over its task's W = 1 CPU
    run's (E only for the CPU group: a GPU reference is one learner)."""
    base = {r["task"]: r for r in runs if r.get("ok") and r["learners"] == 1 and
            r["device"] == "cpu"}  # fmt: skip
    for r in runs:
        b = base.get(r["task"])
        if not r.get("ok") or b is None:
            continue
        s = _ratio(r.get("steady_sps"), b.get("steady_sps"))
        s_whole = _ratio(r.get("sps"), b.get("sps"))
        cpu = r["device"] == "cpu"
        r["speedup"], r["speedup_whole"] = s, s_whole
        r["efficiency"] = round(s / r["learners"], 3) if s and cpu else None
        r["efficiency_whole"] = round(s_whole / r["learners"], 3) if s_whole and cpu else None


def _f(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if value is None else fmt.format(value)


def _split(r: dict[str, Any]) -> str:
    s = r.get("time_split")
    if not s:
        return "–"
    return " / ".join(f"{s[k]:.0%}" for k in ("wait", "compute", "communication", "publish"))


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        "# Learner group: throughput by learner ranks W",
        "",
        f"`{m['command']}` on {harness.machine_line(m['machine'])}; load average "
        f"{m['load_before']} before, {m['load_after']} after; {m['date']}.",
        "",
    ]
    if doc.get("not_available"):
        return "\n".join([*lines, f"Not run: {doc['not_available']}."]) + "\n"
    lines += [
        f"Each run is one `ppomq train --learners W --device cpu` of {m['duration_s']:g} s, "
        f"{m['actors']} actors (actor i feeds rank i mod W), the same total batch at every "
        "W; one run per row, W ascending. SPS, whole run = env steps / (command to the last "
        f"update); steady SPS after the first update past {STEADY_FROM:.0%} of the run's env "
        "steps. Per update (rank 0's means over the steady updates): wait = collecting its "
        "batch and agreeing with the other ranks; SGD, with the collectives inside it "
        "(communication: all-reduces, waits for the slowest rank included); publish. Time "
        "split = the "
        "learner's whole run: wait / compute (targets and SGD less the collectives) / "
        "communication (the collectives) / publish. "
        "S = steady SPS at W / at W = 1, E = S / W (whole-run S and E in brackets); a cuda "
        "row is one learner on the GPU, S against the CPU learner.",
        "",
        "| task | W | device | SPS, whole run | SPS, steady | S | E = S/W "
        "| per update, ms: wait / SGD (all-reduce) / publish | samples per update "
        "| time split: wait / compute / comm / publish | exit |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc["runs"]:
        label = TASKS[r["task"]]["label"]
        if not r.get("ok"):
            why = r.get("error") or "failed"
            lines.append(f"| {label} | {r['learners']} | {r['device']} | – | – | – | – | – "
                         f"| – | – | {why.splitlines()[0][:160]} |")  # fmt: skip
            continue
        u = r["update_ms"]
        lines.append(
            f"| {label} | {r['learners']} | {r['device']} | {_f(r['sps'])} "
            f"| {_f(r['steady_sps'])} "
            f"| {_f(r.get('speedup'), '{:.2f}')} ({_f(r.get('speedup_whole'), '{:.2f}')}) "
            f"| **{_f(r.get('efficiency'), '{:.2f}')}** "
            f"({_f(r.get('efficiency_whole'), '{:.2f}')}) "
            f"| {u['wait']:.0f} / {u['sgd']:.0f} ({u['allreduce']:.0f}) / {u['publish']:.1f} "
            f"| {_f(r['samples_per_update'])} | {_split(r)} | 0 |"
        )
    for s in doc.get("skipped", []):
        lines.append(f"| {TASKS[s['task']]['label']} | {s['learners']} | {s['device']} "
                     "| – | – | – | – | – | – | – | skipped: past the deadline |")  # fmt: skip
    lines += ["", "Commands:", ""] + [f"- `{r['command']}`" for r in doc["runs"] if "command" in r]
    return "\n".join(lines) + "\n"


def save(doc: dict[str, Any], out: Path, bench_run: harness.Run) -> None:
    ratios(doc["runs"])
    doc["meta"].update(date=harness.utc_now(), load_after=harness.loadavg())
    harness.write_results(out, "group_sweep", doc, markdown(doc), bench_run)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--learners", default="1,2,4,8", help="W values, comma-separated")
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--actors", type=int, default=8)
    p.add_argument("--duration-s", type=float, default=15.0)
    p.add_argument("--cuda-reference", action="store_true", help="plus W = 1 on the GPU")
    p.add_argument("--deadline", type=float, default=0.0, help="Unix time; 0: none")
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    harness.add_lock_option(p, default=harness.LOCK_PATH)
    args = p.parse_args(argv)
    bench_run = harness.Run("device.group_sweep", argv)
    tasks = [t for t in args.tasks.split(",") if t]
    if bad := [t for t in tasks if t not in TASKS]:
        p.error(f"--tasks: unknown {bad}; choose from {list(TASKS)}")
    try:
        learners = sorted({int(w) for w in args.learners.split(",") if w})
    except ValueError:
        p.error(f"--learners: {args.learners!r} is not comma-separated integers")
    if not learners or learners[0] != 1:
        p.error("--learners must include 1: the baseline of S")
    if why := check_shapes(tasks, learners, args.actors):
        p.error(why)
    doc: dict[str, Any] = {
        "benchmark": "group_sweep",
        "meta": {
            "command": harness.command_line("device.group_sweep", argv),
            "machine": harness.machine(),
            "load_before": harness.loadavg(),
            "duration_s": args.duration_s,
            "actors": args.actors,
            "steady_from": STEADY_FROM,
            "tasks": {t: TASKS[t] for t in tasks},
        },
        "runs": [],
        "skipped": [],
    }
    if why := learners_flag():
        doc["not_available"] = why
        save(doc, args.out, bench_run)
        print(f"group sweep not run: {why}", flush=True)
        return 0
    arms = plan(tasks, learners, args.cuda_reference)
    for i, arm in enumerate(arms, 1):
        if args.deadline and time.time() + args.duration_s + OVERHEAD_S > args.deadline:
            doc["skipped"].append({"task": arm.task, "learners": arm.learners,
                                   "device": arm.device})  # fmt: skip
            print(f"[{i}/{len(arms)}] {arm.name}: skipped, past the deadline", flush=True)
            continue
        rec = run_arm(arm, args.actors, args.duration_s, args.workdir, args.lock)
        doc["runs"].append(rec)
        save(doc, args.out, bench_run)
        state = "ok" if rec["ok"] else f"FAILED: {rec['error']}"
        print(
            f"[{i}/{len(arms)}] {arm.name}: {_f(rec.get('command_s'), '{:.1f}')} s, "
            f"{_f(rec.get('sps'))} SPS, steady {_f(rec.get('steady_sps'))}, "
            f"S {_f(rec.get('speedup'), '{:.2f}')}, E {_f(rec.get('efficiency'), '{:.2f}')}, "
            f"split {_split(rec)}, {state}",
            flush=True,
        )
    save(doc, args.out, bench_run)
    print(markdown(doc))
    return 0 if all(r["ok"] for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
