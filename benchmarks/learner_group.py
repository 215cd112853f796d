"""Learner group (DD-PPO): one learner against a group of two, at the same total batch.

    .venv/bin/python -m benchmarks.learner_group [--studies scaling,objective,straggler]
        [--tasks cartpole,sleep,halfcheetah] [--rounds 3] [--quick] [--out DIR]
        [--workdir DIR] [--lock PATH]

Every run is its own `ppomq train` (embedded Redis, weightserver, W learner ranks, the
actors), timed from the command to its exit, one at a time under the bench lock. Within a
round the arms run back to back, in reverse order every other round (W=1, W=2, then W=2,
W=1 ...), so that a drift of the shared machine falls on both; round r runs seed r + 1 in
every arm.

Studies:
  scaling    W = 1 against W = 2 learner ranks (`--learners W`), nothing else changed:
             4 actors, the same --batch-samples (the group's total batch: each of W ranks
             trains on its share, and every minibatch step is the union of the ranks'),
             the same epochs and minibatch size. Tasks (--tasks):
               cartpole     CartPole-v1, the built-in defaults (20 epochs of 256-sample
                            minibatches on 1,024 samples): the learner is the bottleneck
               sleep        the I/O-bound env of the actor-scaling benchmark
                            (benchmarks/envs.py: each step sleeps --step-ms, no CPU), the
                            same PPO settings as cartpole
               halfcheetah  HalfCheetah-v5, `--preset mujoco` (CleanRL's update: 2,048
                            samples, 10 epochs of 64-sample minibatches), 4 actors of 512
                            steps
  objective  PPO-Clip against PPO-Penalty (`--objective kl-penalty`) at the largest batch
             (halfcheetah's 2,048, --objective-task), W = 2, with a greedy evaluation at
             the end: SPS, final training return and eval return at equal env steps.
  allreduce  what one minibatch step's all-reduce costs here, outside ppomq: two
             processes all-reduce a buffer of PROBE_FLOATS float32 (gloo, loopback)
             PROBE_STEPS times, beside 0, 2 and 4 busy-looping processes (the actors
             and the other services of a run stand for them): median, mean, p90.
  straggler  DD-PPO's straggler rule at W = 2 on the I/O-bound env, one rank's actors
             slower than the other's: `ppomq train --learners 2 --actors 3` (actors 0 and
             2 feed rank 0, actor 1 rank 1; actor i goes to rank i mod W) plus one
             `ppomq actor --actor-index 3` started by this benchmark beside it (rank 1),
             whose env steps --slow-factor times slower. Rank 1 then needs the slow
             actor's batch for its share of --batch-samples. Arms: wait-all
             (--sync-frac 1.0) against rule (--sync-frac 0.5 --min-share 0.25). CURVE off
             (plain ZeroMQ on loopback) in both arms: the extra actor holds no key.

Figures per run (from the run dir rank 0 writes): SPS = env steps / command to the last
update; steady SPS = env steps per learner second between the first update past
--steady-from of the run's env steps and the last one; per update (means over the steady
updates, progress.csv): the learner's wait for data (collecting its batch, then agreeing
with the other ranks: a rank waits there for the slowest), targets, SGD and, inside SGD,
the all-reduces (the gradient's at every minibatch step and the statistics', waits for
the slowest rank included), and publishing; samples per update (the group's). S = steady
SPS at W=2 / at W=1 (medians over rounds), E = S / W. Results:
OUT/learner_group.{json,md}, rewritten after every run.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness, learning
from benchmarks.envs import DEFAULT_STEP_S, SLEEP_ENV_SPEC, STEP_S_VAR

WORKDIR = harness.REPO / "runs" / "bench-learner-group"
PPOMQ = str(harness.REPO / ".venv" / "bin" / "ppomq")
ACTORS = 4
# --target-return out of reach: every run goes to --total-steps (CartPole would stop at
# its solve threshold, at a different step in each run).
NEVER = ["--target-return", "1e9"]
TASKS: dict[str, dict[str, Any]] = {
    "cartpole": {
        "label": "CartPole-v1 (learner-bound)",
        "env_id": "CartPole-v1",
        "flags": ["--preset", "none", *NEVER],
        "batch": 1024,  # 4 actors x 8 envs x 32 steps
        "steps": 60_000,
    },
    "sleep": {
        "label": "I/O-bound SleepEnv",
        "env_id": SLEEP_ENV_SPEC,
        "flags": ["--preset", "none", *NEVER],
        "batch": 1024,
        "steps": 40_000,
    },
    "halfcheetah": {
        "label": "HalfCheetah-v5, --preset mujoco",
        "env_id": "HalfCheetah-v5",
        # The preset's 2 actors x 1,024 steps, as 4 actors x 512: the same 2,048 samples.
        "flags": ["--preset", "mujoco", "--num-steps", "512", *NEVER],
        "batch": 2048,
        "steps": 60_000,
    },
}
STUDIES = ("scaling", "objective", "straggler")
PROBE = "allreduce"  # not a `ppomq train` study: see allreduce_probe
PROBE_FLOATS = 10_000  # about either MLP's gradient: 9,155 (CartPole), ~11,000 (HalfCheetah)
PROBE_STEPS = 1000
PROBE_BUSY = (0, 2, 4)
SCALING_ARMS = {"W1": ["--learners", "1"], "W2": ["--learners", "2"]}
OBJECTIVE_ARMS = {
    "clip": ["--learners", "2", "--objective", "clip"],
    "kl-penalty": ["--learners", "2", "--objective", "kl-penalty"],
}
STRAGGLER_ARMS = {
    "wait-all": ["--sync-frac", "1.0"],
    "rule": ["--sync-frac", "0.5", "--min-share", "0.25"],
}
STRAGGLER_ACTORS = 3  # plus the slow one started here
SLOW_INDEX = 3  # 3 mod 2: rank 1's
PHASES = ("wait", "targets", "sgd", "allreduce", "publish")


@dataclass(frozen=True)
class Job:
    study: str
    task: str
    arm: str
    round: int

    @property
    def seed(self) -> int:
        return self.round + 1

    @property
    def name(self) -> str:
        return f"{self.study}-{self.task}-{self.arm}-r{self.round}"


def arms_of(study: str) -> dict[str, list[str]]:
    return {"scaling": SCALING_ARMS, "objective": OBJECTIVE_ARMS, "straggler": STRAGGLER_ARMS}[
        study
    ]


def plan(studies: list[str], tasks: list[str], objective_task: str, rounds: int) -> list[Job]:
    """Rounds outermost (an interrupted benchmark has every arm in its first rounds); the
    arms of one comparison back to back, reversed every other round."""
    jobs = []
    for r in range(rounds):
        for study in (s for s in studies if s in STUDIES):  # PROBE runs after them
            its_tasks = {"scaling": tasks, "objective": [objective_task], "straggler": ["sleep"]}
            for task in its_tasks[study]:
                arms = list(arms_of(study))
                jobs += [Job(study, task, a, r) for a in (arms[::-1] if r % 2 else arms)]
    return jobs


@dataclass
class Settings:
    steps: dict[str, int]
    straggler_steps: int
    step_ms: float
    slow_factor: float
    eval_episodes: int
    steady_from: float
    timeout_s: float


def train_argv(job: Job, run_dir: Path, cfg: Settings, ports: tuple[int, int] | None) -> list[str]:
    task = TASKS[job.task]
    actors = STRAGGLER_ACTORS if job.study == "straggler" else ACTORS
    steps = cfg.straggler_steps if job.study == "straggler" else cfg.steps[job.task]
    argv = [
        PPOMQ, "train", "--env-id", task["env_id"], *task["flags"],
        "--actors", str(actors), "--batch-samples", str(task["batch"]),
        "--total-steps", str(steps), "--seed", str(job.seed),
        "--run-dir", str(run_dir), "--no-progress",
        "--eval-episodes", str(cfg.eval_episodes if job.study == "objective" else 0),
    ]  # fmt: skip
    if job.study == "straggler":
        assert ports is not None
        argv += [
            "--learners",
            "2",
            "--no-curve",
            "--rollout-bind",
            f"tcp://127.0.0.1:{ports[0]}",
            "--weightserver-bind",
            f"tcp://127.0.0.1:{ports[1]}",
        ]
    return argv + arms_of(job.study)[job.arm]


def slow_actor_argv(job: Job, cfg: Settings, ports: tuple[int, int]) -> list[str]:
    """The straggler study's extra actor: rank 1's (index 3 mod 2), same env id and batch
    shape as the others; only its env's step sleeps longer (its own environment)."""
    task = TASKS[job.task]
    return [
        PPOMQ, "actor", "--env-id", task["env_id"], "--actor-index", str(SLOW_INDEX),
        "--seed", str(job.seed), "--num-envs", "8", "--num-steps", "32",
        "--learner-addr", f"tcp://127.0.0.1:{ports[0]}",
        "--weightserver-addr", f"tcp://127.0.0.1:{ports[1]}",
    ]  # fmt: skip


def two_free_ports() -> tuple[int, int]:
    socks = [socket.socket() for _ in range(2)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        a, b = (s.getsockname()[1] for s in socks)
        return a, b
    finally:
        for s in socks:
            s.close()


# --- running one ---------------------------------------------------------------------------


def run_job(job: Job, cfg: Settings, workdir: Path, lock: str | None) -> dict[str, Any]:
    run_dir = workdir / job.name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    # PYTHONPATH: the console script does not put the repository on sys.path, and every
    # process (the learners check the env id too) must import benchmarks.envs.
    path = os.pathsep.join(filter(None, [str(harness.REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, **{STEP_S_VAR: str(cfg.step_ms / 1000)})
    ports = two_free_ports() if job.study == "straggler" else None
    argv = train_argv(job, run_dir, cfg, ports)
    rec: dict[str, Any] = {
        "study": job.study, "task": job.task, "arm": job.arm, "round": job.round,
        "seed": job.seed, "run_dir": str(run_dir), "ok": False, "started_at": harness.utc_now(),
    }  # fmt: skip
    with harness.BenchLock(lock) as fl:
        slow = None
        if ports is not None:
            slow_env = dict(env, **{STEP_S_VAR: str(cfg.step_ms * cfg.slow_factor / 1000)})
            slow_cmd = slow_actor_argv(job, cfg, ports)
            rec["slow_actor_command"] = (
                f"{STEP_S_VAR}={slow_env[STEP_S_VAR]} {shlex.join(slow_cmd)}"
            )
            with open(run_dir / "slow-actor.log", "wb") as log:
                slow = subprocess.Popen(
                    slow_cmd,
                    cwd=harness.REPO,
                    env=slow_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        try:
            proc = harness.run_command(argv, run_dir, cfg.timeout_s, env=env)
        finally:
            if slow is not None:
                os.killpg(slow.pid, signal.SIGTERM)
                try:
                    slow.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(slow.pid, signal.SIGKILL)
                    slow.wait()
    rec["lock_wait_s"] = fl.waited_s
    t_cmd = proc.pop("t_cmd")
    rec.update(proc)
    if rec["error"] is None:
        try:
            rec.update(collect(run_dir, t_cmd, cfg.steady_from))
            rec["ok"] = True
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            rec["error"] = f"could not read the results: {exc!r}"
    return rec


def _float(row: dict[str, str], key: str) -> float:
    value = row.get(key)
    return float(value) if value not in (None, "") else 0.0


def steady(rows: list[dict[str, str]], steady_from: float) -> dict[str, Any]:
    """Steady SPS and per-update means over the updates after the first one past
    `steady_from` of the run's env steps (that update is the window's origin)."""
    final = float(rows[-1]["env_steps"])
    start = next(i for i, r in enumerate(rows) if float(r["env_steps"]) >= steady_from * final)
    start = min(start, len(rows) - 2)  # at least one update in the window
    origin, window = rows[start], rows[start + 1 :]
    span = float(window[-1]["wall_s"]) - float(origin["wall_s"])
    steps = float(window[-1]["env_steps"]) - float(origin["env_steps"])
    ms = {
        p: 1000 * statistics.fmean(_float(r, f"time/learner_{p}") for r in window) for p in PHASES
    }
    return {
        "steady_sps": round(steps / span, 1) if span > 0 else None,
        "steady_updates": len(window),
        "steady_window_s": round(span, 3),
        "update_ms": {p: round(v, 2) for p, v in ms.items()},
        "update_total_ms": round(1000 * span / len(window), 2),
        "samples_per_update": round(statistics.fmean(_float(r, "charts/samples") for r in window)),
    }


def collect(run_dir: Path, t_cmd: float, steady_from: float) -> dict[str, Any]:
    out = learning.collect_ppomq(run_dir, t_cmd)
    out.pop("curve")
    out["train_sps"] = learning.train_sps(out)
    s = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "progress.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    if len(rows) < 3:
        raise ValueError(f"only {len(rows)} updates in progress.csv: too short to measure")
    out.update(steady(rows, steady_from))
    versions = int(s["versions"])
    out.update(
        learners=s.get("learners", 1),
        versions=versions,
        learner_time_s=s.get("learner_time_s"),
        whole_update_ms={
            k: round(1000 * v / versions, 2) for k, v in (s.get("learner_time_s") or {}).items()
        },
        waste_ratio=s.get("waste_ratio"),
        batches_rejected=s.get("batches_rejected"),
        mean_policy_age=_mean_age(s.get("policy_age_histogram") or {}),
    )
    slow = [v for k, v in (s.get("actors_seen") or {}).items() if k.startswith(f"a{SLOW_INDEX}-")]
    if slow:  # the straggler study's extra actor, by its id's index prefix
        out["slow_actor"] = slow[0]
    return out


def _mean_age(hist: dict[str, int]) -> float | None:
    n = sum(hist.values())
    return round(sum(int(k) * v for k, v in hist.items()) / n, 3) if n else None


# --- the all-reduce probe ------------------------------------------------------------------


def _probe_rank(rank: int, port: int, floats: int, steps: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # as a learner rank
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    buf = torch.zeros(floats)
    for _ in range(50):  # warm-up: connections, allocations
        dist.all_reduce(buf)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        out.put(times)
    dist.destroy_process_group()


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def allreduce_probe(busy: int, floats: int = PROBE_FLOATS, steps: int = PROBE_STEPS) -> dict:
    """All-reduce latency between two fresh processes, with `busy` spinning beside them."""
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    spinners = [ctx.Process(target=_spin, args=(stop,)) for _ in range(busy)]
    port = two_free_ports()[0]
    ranks = [ctx.Process(target=_probe_rank, args=(r, port, floats, steps, out)) for r in (0, 1)]
    for proc in [*spinners, *ranks]:
        proc.start()
    try:
        times = sorted(out.get(timeout=300))
    finally:
        stop.set()
        for proc in [*ranks, *spinners]:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    return {
        "busy": busy,
        "floats": floats,
        "steps": steps,
        "median_ms": round(1000 * statistics.median(times), 3),
        "mean_ms": round(1000 * statistics.fmean(times), 3),
        "p90_ms": round(1000 * times[int(0.9 * len(times))], 3),
        "load_before": harness.loadavg(),
    }


# --- summarising ---------------------------------------------------------------------------


def _med(values: list[Any]) -> float | None:
    return harness.median([v for v in values if v is not None], 3)


def summarise_arm(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    steady_sps = [r["steady_sps"] for r in ok if r.get("steady_sps")]
    returns = [r["mean_return_20"] for r in ok if r.get("mean_return_20") is not None]
    evals = [r["eval_return"] for r in ok if r.get("eval_return") is not None]
    slow = [r["slow_actor"] for r in ok if r.get("slow_actor")]
    return {
        "runs": len(ok),
        "failed": [r["error"] for r in runs if not r.get("ok")],
        "command_s": _med([r["command_s"] for r in ok]),
        "sps": _med([r["sps"] for r in ok]),
        "train_sps": _med([r.get("train_sps") for r in ok]),
        "steady_sps": _med(steady_sps),
        "steady_sps_min_max": [min(steady_sps), max(steady_sps)] if steady_sps else None,
        "env_steps": _med([r["env_steps"] for r in ok]),
        "versions": _med([r["versions"] for r in ok]),
        "samples_per_update": _med([r["samples_per_update"] for r in ok]),
        "update_total_ms": _med([r["update_total_ms"] for r in ok]),
        "update_ms": {p: _med([r["update_ms"][p] for r in ok]) for p in PHASES},
        "mean_return_20": _med(returns),
        "returns": returns,
        "eval_return": _med(evals),
        "evals": evals,
        "waste_ratio": _med([r.get("waste_ratio") for r in ok]),
        "mean_policy_age": _med([r.get("mean_policy_age") for r in ok]),
        "slow_actor_accepted_share": _med(
            [s["accepted"] / s["batches"] if s.get("batches") else None for s in slow]
        ),
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (study, task): each arm's medians; for scaling, S and E."""
    out = []
    for study in STUDIES:
        for task in dict.fromkeys(r["task"] for r in runs if r["study"] == study):
            mine = [r for r in runs if r["study"] == study and r["task"] == task]
            arms = {
                a: summarise_arm([r for r in mine if r["arm"] == a])
                for a in arms_of(study)
                if any(r["arm"] == a for r in mine)
            }
            entry: dict[str, Any] = {"study": study, "task": task, "arms": arms}
            if study == "scaling" and {"W1", "W2"} <= arms.keys():
                entry.update(scaling_ratios(arms["W1"], arms["W2"]))
            out.append(entry)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def scaling_ratios(w1: dict[str, Any], w2: dict[str, Any]) -> dict[str, Any]:
    s = _ratio(w2["steady_sps"], w1["steady_sps"])
    s_whole = _ratio(w2["sps"], w1["sps"])
    return {
        "speedup": s,
        "efficiency": round(s / 2, 3) if s else None,
        "speedup_whole": s_whole,
        "efficiency_whole": round(s_whole / 2, 3) if s_whole else None,
        "command_s_ratio": _ratio(w2["command_s"], w1["command_s"]),
    }


# --- writing -------------------------------------------------------------------------------


def _f(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if value is None else fmt.format(value)


def _phases(a: dict[str, Any]) -> str:
    u = a["update_ms"]
    sgd, ar = u["sgd"], u["allreduce"]
    return (
        f"{_f(u['wait'], '{:.0f}')} / {_f(sgd, '{:.0f}')} ({_f(ar, '{:.0f}')}) / "
        f"{_f(u['publish'], '{:.1f}')}"
    )


def _spread(a: dict[str, Any]) -> str:
    mm = a["steady_sps_min_max"]
    return "" if not mm else f" ({mm[0]:,.0f}–{mm[1]:,.0f})"


def scaling_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| task | W | runs | command to exit (s) | SPS, whole run | SPS, steady (min–max) "
        "| S | E = S/W | per update, ms: wait / SGD (all-reduce inside) / publish "
        "| update, ms | samples per update |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in entries:
        for arm, a in e["arms"].items():
            w = 1 if arm == "W1" else 2
            s = 1.0 if w == 1 else e.get("speedup")
            eff = 1.0 if w == 1 else e.get("efficiency")
            label = TASKS[e["task"]]["label"]
            lines.append(
                f"| {label} | {w} | {a['runs']} | {_f(a['command_s'], '{:.1f}')} "
                f"| {_f(a['sps'])} | {_f(a['steady_sps'])}{_spread(a)} | {_f(s, '{:.2f}')} "
                f"| **{_f(eff, '{:.2f}')}** | {_phases(a)} | {_f(a['update_total_ms'], '{:.0f}')} "
                f"| {_f(a['samples_per_update'])} |"
            )
    return lines


def _pm(values: list[float]) -> str:
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):,.0f} ± {sd:,.0f}"


def objective_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| task | objective | runs | env steps | command to exit (s) | SPS, whole run "
        "| SPS, steady | per update, ms: wait / SGD (all-reduce) / publish "
        "| final return, last 20 (mean ± sd) | greedy eval (mean ± sd) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in entries:
        for arm, a in e["arms"].items():
            lines.append(
                f"| {TASKS[e['task']]['label']} | {arm} | {a['runs']} | {_f(a['env_steps'])} "
                f"| {_f(a['command_s'], '{:.1f}')} | {_f(a['sps'])} | {_f(a['steady_sps'])} "
                f"| {_phases(a)} | {_pm(a['returns'])} | {_pm(a['evals'])} |"
            )
    return lines


def straggler_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| arm | runs | command to exit (s) | SPS, whole run | SPS, steady (min–max) "
        "| per update, ms: wait / SGD (all-reduce) / publish | update, ms "
        "| samples per update | waste | mean policy age | slow actor's batches accepted |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in entries:
        for arm, a in e["arms"].items():
            flags = " ".join(STRAGGLER_ARMS[arm])
            lines.append(
                f"| {arm} (`{flags}`) | {a['runs']} | {_f(a['command_s'], '{:.1f}')} "
                f"| {_f(a['sps'])} | {_f(a['steady_sps'])}{_spread(a)} | {_phases(a)} "
                f"| {_f(a['update_total_ms'], '{:.0f}')} | {_f(a['samples_per_update'])} "
                f"| {_f(a['waste_ratio'], '{:.1%}')} | {_f(a['mean_policy_age'], '{:.2f}')} "
                f"| {_f(a['slow_actor_accepted_share'], '{:.0%}')} |"
            )
    return lines


def commands(doc: dict[str, Any], study: str) -> list[str]:
    """Each arm's command in the first round it ran (the seed and run dir change by round)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(doc["runs"], key=lambda r: r["round"]):
        if r["study"] == study:
            seen.setdefault((r["task"], r["arm"]), r)
    lines = ["", "Commands (round 0; later rounds change --seed and --run-dir):", ""]
    for (_task, _arm), r in seen.items():
        lines.append(f"- `{r['command']}`")
        if r.get("slow_actor_command"):
            lines.append(f"  with, beside it: `{r['slow_actor_command']}`")
    return lines


def _rounds(doc: dict[str, Any]) -> int:
    return 1 + max((r["round"] for r in doc["runs"]), default=0)


def _invocations(doc: dict[str, Any]) -> str:
    """The commands whose figures the file holds (a later one replaced its studies)."""
    studies = {r["study"] for r in doc["runs"]} | ({PROBE} if doc.get("allreduce") else set())
    live = []
    for inv in reversed(doc["invocations"]):
        mine = studies & set(inv["studies"])
        if mine:
            live.append(inv)
            studies -= mine
    return ", then ".join(f"`{inv['command']}`" for inv in reversed(live))


def render_markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    by = {st: [e for e in doc["summary"] if e["study"] == st] for st in STUDIES}
    lines = [
        "# Learner group (DD-PPO): one learner against two",
        "",
        f"{_invocations(doc)} (each run under `flock -o {harness.LOCK_PATH}`) on "
        f"{harness.machine_line(m['machine'])}; 1-minute load average "
        f"{m['load_before']} before, {m['load_after']} after (a shared machine); finished "
        f"{m['date']}. Every run is one `ppomq train`, timed from the command to its exit; "
        f"medians over {_rounds(doc)} interleaved round(s) (the arms back to back, their order "
        "reversed every other round; round r runs seed r + 1 in every arm). SPS, whole run = "
        "env steps / (command to the last update); steady SPS = env steps per learner second "
        f"after the first update past {m['steady_from']:.0%} of the run's env steps. Per "
        "update: rank 0's means over those steady updates (progress.csv): wait = collecting "
        "its batch, then agreeing with the other ranks (where it waits for the slowest); "
        "SGD = the epochs of minibatch steps, the all-reduces (gradient at every step, "
        "statistics, waits for the slowest rank) inside it; publish = weights to Redis. "
        f"SleepEnv sleeps {m['step_ms']:g} ms per env step.",
    ]
    if by["scaling"]:
        lines += [
            "",
            "## Throughput by learner ranks W, same total batch",
            "",
            f"{ACTORS} actors and the same `--batch-samples` (the group's total) at W = 1 and "
            "2; only `--learners` differs. S = steady SPS at W = 2 / at W = 1 (medians), "
            "E = S / W.",
            "",
            *scaling_table(by["scaling"]),
            "",
        ]
        for e in by["scaling"]:
            if e.get("speedup_whole") is not None:
                lines.append(
                    f"- {TASKS[e['task']]['label']}: whole-run S = {e['speedup_whole']:.2f} "
                    f"(E = {e['efficiency_whole']:.2f}); command to exit at W = 2 is "
                    f"{e['command_s_ratio']:.2f}x W = 1's."
                )
        lines += commands(doc, "scaling")
    if by["objective"]:
        lines += [
            "",
            "## PPO-Clip against PPO-Penalty, W = 2, the largest batch",
            "",
            f"Both arms at W = 2, {ACTORS} actors, the same env steps and seeds; a "
            f"{m['eval_episodes']}-episode greedy evaluation at the end (in the command's "
            "time, not in the SPS).",
            "",
            *objective_table(by["objective"]),
            *commands(doc, "objective"),
        ]
    if by["straggler"]:
        lines += [
            "",
            "## The straggler rule, W = 2, one rank's actors slower",
            "",
            f"I/O-bound SleepEnv; rank 0 is fed by 2 actors at {m['step_ms']:g} ms per step, "
            f"rank 1 by one such actor and one whose steps take {m['slow_factor']:g}x as "
            "long (started beside `ppomq train`, index 3 → rank 1); the update is "
            "`--batch-samples 1024` for the group, 512 per rank, 256 per batch. Waste = "
            "batches refused (stale) or dropped / produced; the slow actor's batches "
            "accepted out of those it sent.",
            "",
            *straggler_table(by["straggler"]),
            *commands(doc, "straggler"),
        ]
    if doc.get("allreduce"):
        lines += [
            "",
            "## One all-reduce on this machine, outside ppomq",
            "",
            f"Two fresh processes all-reduce {PROBE_FLOATS:,} float32 (about either MLP's "
            f"gradient) {doc['allreduce'][0]['steps']:,} times with gloo over loopback, one "
            "torch thread each, beside N busy-looping processes; 1-minute load average before "
            "each.",
            "",
            "| busy processes | median, ms | mean, ms | p90, ms | load before |",
            "|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {p['busy']} | {p['median_ms']:.3f} | {p['mean_ms']:.3f} | {p['p90_ms']:.3f} "
            f"| {p['load_before'][0]} |"
            for p in doc["allreduce"]
        ]
    failed = [r for r in doc["runs"] if not r.get("ok")]
    if failed:
        lines += ["", "## Runs that failed", ""]
        lines += [
            f"- {r['study']} {r['task']} {r['arm']} round {r['round']}: {r['error']}"
            for r in failed
        ]
    return "\n".join(lines) + "\n"


def previous(out: Path, studies: list[str], *, keep: bool) -> dict[str, Any]:
    """The result file to add to: with `keep`, OUT/learner_group.json's runs of the studies
    not run now (and its probe, unless it runs now) stay; else a fresh one."""
    path = out / "learner_group.json"
    doc: dict[str, Any] = {"benchmark": "learner-group", "invocations": [], "runs": []}
    if keep and path.exists():
        old = json.loads(path.read_text())
        if old.get("benchmark") == doc["benchmark"]:
            doc["invocations"] = old.get("invocations", [])
            doc["runs"] = [r for r in old.get("runs", []) if r["study"] not in studies]
            if PROBE not in studies and old.get("allreduce"):
                doc["allreduce"] = old["allreduce"]
            if "meta" in old:
                doc["meta"] = old["meta"]
    return doc


def save(doc: dict[str, Any], out: Path, bench_run: harness.Run) -> None:
    doc["summary"] = summarise(doc["runs"])
    now = harness.utc_now()
    doc["meta"]["load_after"] = doc["invocations"][-1]["load_after"] = harness.loadavg()
    doc["meta"]["date"] = doc["invocations"][-1]["date"] = now
    harness.write_results(out, "learner_group", doc, render_markdown(doc), bench_run)


# --- main ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--studies", default=",".join([*STUDIES, PROBE]))
    p.add_argument("--tasks", default=",".join(TASKS), help="the scaling study's tasks")
    p.add_argument("--objective-task", default="halfcheetah")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--steps", default="", help="env steps per task, e.g. cartpole=60000,sleep=40000"
    )
    p.add_argument("--straggler-steps", type=int, default=20_000)
    p.add_argument("--step-ms", type=float, default=DEFAULT_STEP_S * 1000)
    p.add_argument(
        "--slow-factor",
        type=float,
        default=3.0,
        help="the straggler's env step, in multiples of --step-ms",
    )
    p.add_argument("--eval-episodes", type=int, default=10, help="objective study's eval")
    p.add_argument("--steady-from", type=float, default=0.25)
    p.add_argument("--timeout-s", type=float, default=600.0, help="per run")
    p.add_argument(
        "--quick",
        action="store_true",
        help="1 round of short runs and a short probe (a smoke test; the figures mean little)",
    )
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    p.add_argument("--no-keep", dest="keep", action="store_false",
                   help="start OUT/learner_group.json afresh (default: keep the runs of "
                   "the studies not run now)")  # fmt: skip
    harness.add_lock_option(p, default=harness.LOCK_PATH)
    args = p.parse_args(argv)
    bench_run = harness.Run("learner_group", argv)
    studies = [s for s in args.studies.split(",") if s]
    tasks = [t for t in args.tasks.split(",") if t]
    if bad := [s for s in studies if s not in (*STUDIES, PROBE)]:
        p.error(f"--studies: unknown {bad}; choose from {[*STUDIES, PROBE]}")
    if bad := [t for t in [*tasks, args.objective_task] if t not in TASKS]:
        p.error(f"--tasks/--objective-task: unknown {bad}; choose from {list(TASKS)}")
    steps = {t: int(v["steps"]) for t, v in TASKS.items()}
    probe_steps = PROBE_STEPS
    if args.quick:
        probe_steps = PROBE_STEPS // 10
        args.rounds, args.eval_episodes = 1, 1
        steps = {"cartpole": 6000, "sleep": 6000, "halfcheetah": 12_000}
        args.straggler_steps = 6000
    for item in filter(None, args.steps.split(",")):
        name, _, value = item.partition("=")
        if name not in TASKS or not value.isdigit():
            p.error(f"--steps: {item!r} is not TASK=STEPS with TASK in {list(TASKS)}")
        steps[name] = int(value)
    if not Path(PPOMQ).exists():
        p.error(f"no {PPOMQ}: install the project into .venv first")
    cfg = Settings(
        steps=steps,
        straggler_steps=args.straggler_steps,
        step_ms=args.step_ms,
        slow_factor=args.slow_factor,
        eval_episodes=args.eval_episodes,
        steady_from=args.steady_from,
        timeout_s=args.timeout_s,
    )
    jobs = plan(studies, tasks, args.objective_task, args.rounds)
    doc = previous(args.out, studies, keep=args.keep)
    invocation = {"command": harness.command_line("learner_group", argv),
                  "load_before": harness.loadavg(), "studies": studies}  # fmt: skip
    doc["invocations"].append(invocation)
    if jobs or "meta" not in doc:
        doc["meta"] = {
            "command": invocation["command"],
            "machine": harness.machine(),
            "load_before": harness.loadavg(),
            "rounds": args.rounds,
            "steps": steps,
            "straggler_steps": args.straggler_steps,
            "step_ms": args.step_ms,
            "slow_factor": args.slow_factor,
            "eval_episodes": args.eval_episodes,
            "steady_from": args.steady_from,
            "actors": ACTORS,
        }
    for i, job in enumerate(jobs, 1):
        rec = run_job(job, cfg, args.workdir, args.lock)
        doc["runs"].append(rec)
        save(doc, args.out, bench_run)
        state = "ok" if rec["ok"] else f"FAILED: {rec['error']}"
        print(
            f"[{i}/{len(jobs)}] {job.name}: {_f(rec.get('command_s'), '{:.1f}')} s, "
            f"steady {_f(rec.get('steady_sps'))} SPS, {state}",
            flush=True,
        )
    if PROBE in studies:
        doc["allreduce"] = []
        for busy in PROBE_BUSY:
            with harness.BenchLock(args.lock):
                doc["allreduce"].append(allreduce_probe(busy, steps=probe_steps))
            save(doc, args.out, bench_run)
    print(render_markdown(doc))
    return 0 if all(r["ok"] for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
