"""ppomq against itself under other settings, one study at a time:

    .venv/bin/python -m benchmarks.variants run-ahead [--tasks cartpole,acrobot,halfcheetah]
        [--seeds 1,2,3,4,5] [--arms ...] [--scan] [--out benchmarks/results]
        [--workdir runs/bench-variants] [--lock PATH]
    .venv/bin/python -m benchmarks.variants objective [--tasks cartpole,halfcheetah] ...
    .venv/bin/python -m benchmarks.variants breakout-factors [--seeds 1,2,3] ...
        [--task-flags "..."] [--marks 100000,200000] [--concurrent N]

run-ahead: lock-step actors against actors that run ahead, with GAE or V-trace. Arms, each
the task's command plus:
  lockstep         --batches-per-version 1 --targets gae (the former defaults: an
                   actor sends one batch per version, then waits for the next)
  runahead-gae     --batches-per-version 0 --max-staleness 16 --targets gae (actors never
                   wait; batches up to 16 versions old train as if fresh)
  runahead-vtrace  --batches-per-version 0 --max-staleness 16 --targets vtrace (the same
                   batches, corrected with V-trace for the learner's current policy)
Every arm's update is 2 actors' batches (2 x N x T samples): lockstep by the default
per-actor rule (`--batch-samples 0`, one batch from each live actor), the run-ahead arms by
`--batch-samples 2*N*T`, since actors that never wait need a fixed update size (and that
is the size the per-actor rule gives lockstep, so the arms differ only in waiting).
Tasks: CartPole-v1 and Acrobot-v1 (ppomq's defaults, 2 actors; to the env's own solved
threshold, 475 and -100, within a step cap), HalfCheetah-v5 (`--preset mujoco`, 1M steps,
a 10-episode greedy evaluation). `--scan` adds runahead-vtrace at 1 and 4 actors with the
update size of 2 (--batch-samples fixed), to show the algorithm does not move with N.

objective: PPO's clipped surrogate against its adaptive KL penalty (the PPO paper, section
4), both in sync mode (exact on-policy PPO): sync-clip `--mode sync --objective clip`,
sync-kl-penalty `--mode sync --objective kl-penalty`, on CartPole-v1 and HalfCheetah-v5;
KL and clip-fraction curves (the learner's approx_kl and clip_fraction per update) go to
OUT/variants_objective.png.

breakout-factors: what Sample Factory's and SB3's Breakout settings do that CleanRL's do
not, one at a time, on Breakout (`--preset atari`, its 2-thread learner as
benchmarks.learning runs it), every arm's flags given whatever the preset holds:
cleanrl (`--no-norm-obs --no-norm-returns --clip-vloss`: CleanRL's settings, pixels / 255);
norm-obs (each pixel normalized by its running mean and variance, Sample Factory's
`normalize_input`); no-clip-vloss (CleanRL's settings with the value loss unclipped, as
SB3's default clip_range_vf None; Sample Factory clips normalized values at 1.0);
norm-returns (norm-obs with `--norm-returns`: the value head learns returns normalized by
their running mean and std, Sample Factory's `normalize_returns`; the value loss clipped
at 0.1 in normalized units); norm-returns-no-clip-vloss (the same unclipped: the atari
preset's); sf-lr-decay (the preset's with Sample Factory's learning-rate decay, whose
horizon counts frames: `--anneal-lr-steps 4000000` on the 1M-step schedule, ending at 3/4
of the rate); unshuffled (the preset's with Sample Factory's `shuffle_minibatches` False:
`--no-shuffle-minibatches`); sf-value-weight (the preset's with Sample Factory's weight on
the value loss, twice CleanRL's: `--vf-coef 1.0`, as its loss is value_loss_coeff 0.5 times
the squared error where CleanRL's is vf_coef 0.5 times half of it); sf-init (the preset's
with Sample Factory's initial weights, orthogonal with gain 1 on every layer: `--init
unit`). Every arm names all seven settings. Each run has the
1M-step run's learning-rate schedule and stops after 660 s (about 160k steps on the 2-core
machine at 250 SPS), where Sample Factory's own curves are already well ahead; the figures
are the mean return of the last 20 games at 100k and 150k steps (--marks: others). Task
breakout-device is the same on the GPU machine (benchmarks/device/breakout_factors.sh):
ale-py's C++ env backend (that machine has no OpenCV), its duration and device from
--task-flags, and --concurrent runs at once, whose command times are then not comparable
(the figures are returns at equal steps).

Each run is its own `ppomq train`, timed from the command to its exit, one at a time under
the bench lock; seeds outermost, the arms' order rotating with the seed. Per run: command
time, steps and seconds (from the command) to the target, final return (mean of the last 20
training episodes), greedy eval, waste (batches refused or dropped / produced), mean policy
age of trained batches, the actors' share of main-loop time spent sampling (their
`time:` log line), the learner's share of update time spent waiting for data, and the
median approx_kl and clip fraction over the updates. Ratios are per seed, to the study's
baseline arm (lockstep; sync-clip). Results: OUT/variants_{study}.{json,md(,png)},
rewritten after every run; a second invocation skips runs already recorded as ok.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness, learning, plot_style
from benchmarks.contenders.common import thin

WORKDIR = harness.REPO / "runs" / "bench-variants"

TASKS: dict[str, dict[str, Any]] = {
    "cartpole": {"env_id": "CartPole-v1", "flags": "", "steps": 300_000, "target": 475.0},
    "acrobot": {"env_id": "Acrobot-v1", "flags": "", "steps": 500_000, "target": -100.0},
    "halfcheetah": {
        "env_id": "HalfCheetah-v5",
        "flags": "--preset mujoco --eval-episodes 10",
        "steps": 1_000_000,
        "target": None,
    },
    "breakout": {
        "env_id": "BreakoutNoFrameskip-v4",
        "flags": "--preset atari --torch-threads 2 --eval-episodes 0 --duration-s 660",
        "steps": 1_000_000,
        "target": None,
        "marks": (100_000, 150_000),
    },
    "breakout-device": {
        "env_id": "BreakoutNoFrameskip-v4",
        "flags": "--preset atari --env-backend ale --torch-threads 1 --eval-episodes 0",
        "steps": 1_000_000,
        "target": None,
        "marks": (100_000, 200_000, 300_000, 400_000),
    },
}


def _update_flags(
    *, anneal_lr_steps: int = 0, shuffle: bool = True, vf_coef: float = 0.5, init: str = "cleanrl"
) -> str:
    """A Breakout arm's learning-rate horizon, minibatch order, value-loss weight and
    initial weights; the defaults are CleanRL's (annealed to 0 at --total-steps, shuffled,
    vf_coef 0.5, its per-layer gains)."""
    order = "--shuffle-minibatches" if shuffle else "--no-shuffle-minibatches"
    return f"--anneal-lr-steps {anneal_lr_steps} {order} --vf-coef {vf_coef} --init {init}"


_CLEANRL_UPDATE = _update_flags()
# The atari preset's normalized pixels and value targets, value loss unclipped.
_NORMALIZED = "--norm-obs --norm-returns --no-clip-vloss"
STUDIES: dict[str, dict[str, Any]] = {
    "run-ahead": {
        "tasks": ("cartpole", "acrobot", "halfcheetah"),
        "arms": {
            "lockstep": "--batches-per-version 1 --targets gae",
            "runahead-gae": "--batches-per-version 0 --max-staleness 16 --targets gae",
            "runahead-vtrace": "--batches-per-version 0 --max-staleness 16 --targets vtrace",
        },
    },
    "objective": {
        "tasks": ("cartpole", "halfcheetah"),
        "arms": {
            "sync-clip": "--mode sync --objective clip",
            "sync-kl-penalty": "--mode sync --objective kl-penalty",
        },
    },
    "breakout-factors": {
        "tasks": ("breakout",),
        # Every arm names all seven settings the study varies, so that none takes the
        # preset's value; the last three are CleanRL's unless the arm is about them.
        "arms": {
            "cleanrl": f"--no-norm-obs --no-norm-returns --clip-vloss {_CLEANRL_UPDATE}",
            "norm-obs": f"--norm-obs --no-norm-returns --clip-vloss {_CLEANRL_UPDATE}",
            "no-clip-vloss": f"--no-norm-obs --no-norm-returns --no-clip-vloss {_CLEANRL_UPDATE}",
            "norm-returns": f"--norm-obs --norm-returns --clip-vloss {_CLEANRL_UPDATE}",
            "norm-returns-no-clip-vloss": f"{_NORMALIZED} {_CLEANRL_UPDATE}",
            # Sample Factory's linear_decay on the 1M-step runs: its horizon counts frames,
            # 4x the agent steps, so the rate ends at 3/4 of its start.
            "sf-lr-decay": f"{_NORMALIZED} {_update_flags(anneal_lr_steps=4_000_000)}",
            "unshuffled": f"{_NORMALIZED} {_update_flags(shuffle=False)}",
            # Sample Factory's value loss is value_loss_coeff (0.5) x the squared error;
            # CleanRL's is vf_coef (0.5) x half of it. --vf-coef 1.0 is Sample Factory's.
            "sf-value-weight": f"{_NORMALIZED} {_update_flags(vf_coef=1.0)}",
            # Sample Factory's policy_init_gain 1.0 on every layer.
            "sf-init": f"{_NORMALIZED} {_update_flags(init='unit')}",
        },
    },
}
ARMS: dict[str, str] = {a: f for st in STUDIES.values() for a, f in st["arms"].items()}
DEFAULT_ACTORS = 2
SCAN_ACTORS = (1, 4)
SCAN_ARM = "runahead-vtrace"
# The actors' line for people, read only until they emit actor.stop.


def study_of(arm: str) -> str:
    return next(name for name, st in STUDIES.items() if arm in st["arms"])


def baseline_of(arm: str) -> str:
    """The study's first arm: what the others are compared with."""
    return next(iter(STUDIES[study_of(arm)]["arms"]))


@dataclass(frozen=True)
class Job:
    task: str
    arm: str
    actors: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.task}-{self.arm}-a{self.actors}-s{self.seed}"

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.task, self.arm, self.actors, self.seed)


def plan(tasks: list[str], arms: list[str], seeds: list[int], scan: bool) -> list[Job]:
    jobs = []
    for i, seed in enumerate(seeds):
        order = arms[i % len(arms) :] + arms[: i % len(arms)]
        for task in tasks:
            jobs += [Job(task, arm, DEFAULT_ACTORS, seed) for arm in order]
            if scan:
                jobs += [Job(task, SCAN_ARM, n, seed) for n in SCAN_ACTORS]
    return jobs


def command(job: Job, run_dir: Path, task_flags: str = "") -> list[str]:
    """The job's `ppomq train`; `task_flags` go after the task's own (and win over them)."""
    task = TASKS[job.task]
    flags = [*shlex.split(task["flags"]), *shlex.split(task_flags)]
    argv = harness.ppomq_argv("train", *flags, "--env-id", task["env_id"])
    argv += ["--total-steps", str(task["steps"]), "--seed", str(job.seed)]
    argv += ["--run-dir", str(run_dir), "--no-progress", *shlex.split(ARMS[job.arm])]
    if task["target"] is not None:
        argv += ["--target-return", f"{task['target']:g}", "--eval-episodes", "0"]
    # The update is DEFAULT_ACTORS' worth of batches whatever the number of actors: the
    # per-actor rule (0) gives that at DEFAULT_ACTORS; actors that never wait
    # (--batches-per-version 0) need it as a fixed size, as does another number of actors.
    fixed = job.actors != DEFAULT_ACTORS or "--batches-per-version 0" in ARMS[job.arm]
    size = str(_update_samples(job.task)) if fixed else "0"
    return [*argv, "--actors", str(job.actors), "--batch-samples", size]


def _update_samples(task: str) -> int:
    """The update size DEFAULT_ACTORS actors give with the task's settings."""
    from ppomq.core.settings import TrainSettings
    from ppomq.core.settings.layering import load_settings

    flags = shlex.split(TASKS[task]["flags"])
    preset = {"preset": flags[flags.index("--preset") + 1]} if "--preset" in flags else {}
    s = load_settings(TrainSettings, preset)
    return DEFAULT_ACTORS * s.num_envs * s.num_steps


def actor_sample_share(run_dir: Path) -> float | None:
    """Mean over the actors of the share of main-loop time spent in sample() (each actor's
    last `actor.stop` event, docs/concepts/events.md), as a fraction."""
    from ppomq.core.events import EVENTS_FILE, read_events

    seconds = {
        e["source"]: e["seconds"]
        for e in read_events(run_dir / EVENTS_FILE)
        if e["event"] == "actor.stop" and isinstance(e.get("seconds"), dict)
    }
    shares = [s["sample"] / sum(s.values()) for s in seconds.values() if sum(s.values()) > 0]
    return round(statistics.fmean(shares), 4) if shares else None


def run_figures(run_dir: Path, t_cmd: float, target: float | None) -> dict[str, Any]:
    """What a run's dir says, beyond learning.collect_ppomq's figures."""
    rec = learning.collect_ppomq(run_dir, t_cmd)
    s = json.loads((run_dir / "summary.json").read_text())
    ages = {int(k): v for k, v in s.get("policy_age_histogram", {}).items()}
    phases = s.get("learner_time_s", {})
    busy = sum(phases.values())
    rec.update(
        waste_ratio=round(float(s.get("waste_ratio") or 0.0), 4),
        mean_policy_age=round(sum(k * v for k, v in ages.items()) / sum(ages.values()), 3)
        if ages
        else None,
        **_kl_figures(run_dir),
        learner_wait_share=round(phases.get("wait", 0.0) / busy, 4) if busy else None,
        actor_sample_share=actor_sample_share(run_dir),
        versions=s.get("versions"),
    )
    if target is not None:
        rec["time_to_target_s"] = learning.time_to(rec["curve"], target)
    return rec


def returns_at(curve_rows: list[list[float]], marks: tuple[int, ...]) -> dict[str, float | None]:
    """The mean return of the last 20 episodes as it stood at each mark (env steps; None
    before the first episode or past the run's end)."""
    out: dict[str, float | None] = {}
    for mark in marks:
        before = [row for row in curve_rows if row[0] <= mark]
        reached = curve_rows and curve_rows[-1][0] >= mark
        out[str(mark)] = round(before[-1][3], 2) if before and reached else None
    return out


def _kl_figures(run_dir: Path) -> dict[str, Any]:
    """Median approx_kl and clip fraction over the updates, and their curve (thinned)."""
    import csv

    with (run_dir / "progress.csv").open() as fh:
        rows = [
            (int(r["env_steps"]), float(r["losses/approx_kl"]), float(r["losses/clip_fraction"]))
            for r in csv.DictReader(fh)
            if r.get("losses/approx_kl") not in (None, "")
        ]
    if not rows:
        return {"approx_kl": None, "clip_fraction": None, "kl_curve": []}
    return {
        "approx_kl": round(statistics.median(r[1] for r in rows), 5),
        "clip_fraction": round(statistics.median(r[2] for r in rows), 4),
        "kl_curve": [[s, round(k, 5), round(c, 4)] for s, k, c in thin(rows, 200)],
    }


def run_job(
    job: Job,
    workdir: Path,
    lock: str | None,
    timeout_s: float,
    *,
    task_flags: str = "",
    marks: tuple[int, ...] = (),
) -> dict[str, Any]:
    run_dir = workdir / job.name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    argv = command(job, run_dir, task_flags)
    rec: dict[str, Any] = {
        "task": job.task, "arm": job.arm, "actors": job.actors, "seed": job.seed,
        "env_id": TASKS[job.task]["env_id"], "run_dir": str(run_dir), "ok": False,
        "command": shlex.join(argv),
        "started_at": harness.utc_now(),
    }  # fmt: skip
    with harness.BenchLock(lock) as fl:
        proc = harness.run_command(argv, run_dir, timeout_s)
    rec["lock_wait_s"] = fl.waited_s
    t_cmd = proc.pop("t_cmd")
    rec.update(proc)
    if rec["error"] is None:
        try:
            rec.update(run_figures(run_dir, t_cmd, TASKS[job.task]["target"]))
            marks = marks or TASKS[job.task].get("marks", ())
            if marks:
                rec["return_at"] = returns_at(rec["curve"], marks)
            rec["ok"] = True
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            rec["error"] = f"could not read the results: {exc!r}"
    return rec


# --- summarising -----------------------------------------------------------------------------

FIGURES = (
    ("command_s", "command (s)", "{:,.1f}"),
    ("solved_at_env_steps", "steps to target", "{:,.0f}"),
    ("time_to_target_s", "s to target", "{:,.1f}"),
    ("mean_return_20", "final return", "{:,.1f}"),
    ("eval_return", "greedy eval", "{:,.1f}"),
    ("sps", "SPS", "{:,.0f}"),
    ("actor_sample_share", "actors sampling", "{:.0%}"),
    ("learner_wait_share", "learner waiting", "{:.0%}"),
    ("waste_ratio", "waste", "{:.1%}"),
    ("mean_policy_age", "policy age", "{:.2f}"),
    ("approx_kl", "approx KL", "{:.4f}"),
    ("clip_fraction", "clip fraction", "{:.3f}"),
)


TARGET_FIGURES = ("time_to_target_s", "solved_at_env_steps")


def _median(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, arm, actors): the median of each figure over the ok seeds, how many seeds
    reached the target, and the per-seed ratios to the baseline arm's command time, time
    to target and steps to target."""
    ok = [r for r in runs if r.get("ok")]
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in ok:
        groups.setdefault((r["task"], r["arm"], r["actors"]), []).append(r)
    out = []
    for (task, arm, actors), rs in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        row: dict[str, Any] = {"task": task, "arm": arm, "actors": actors, "seeds": len(rs)}
        targeted = TASKS[task]["target"] is not None
        # Without a --target-return a run still records when it crossed the env's own
        # threshold (HalfCheetah's 4,800): not a target of this study, so not a figure.
        skipped = () if targeted else TARGET_FIGURES
        for key, _, _ in FIGURES:
            row[key] = None if key in skipped else _median([r.get(key) for r in rs])
        if targeted:
            row["reached"] = sum(r.get("solved_at_env_steps") is not None for r in rs)
        marks = [m for r in rs for m in r.get("return_at", {})]
        for mark in sorted(set(marks), key=int):
            row.setdefault("return_at", {})[mark] = _median(
                [r.get("return_at", {}).get(mark) for r in rs]
            )
        baseline = groups.get((task, baseline_of(arm), DEFAULT_ACTORS), [])
        base = {r["seed"]: r for r in baseline}
        for key in ("command_s", *TARGET_FIGURES):
            pairs = (
                []
                if key in skipped
                else [
                    r[key] / base[r["seed"]][key]
                    for r in rs
                    if r["seed"] in base and r.get(key) and base[r["seed"]].get(key)
                ]
            )
            row[f"{key}_vs_baseline"] = round(statistics.median(pairs), 3) if pairs else None
        out.append(row)
    return out


def _order(key: tuple[str, str, int]) -> tuple[int, int, int]:
    task, arm, actors = key
    return (list(TASKS).index(task), list(ARMS).index(arm), actors)


TITLES = {
    "run-ahead": "Lock-step against run-ahead actors",
    "objective": "Clipped PPO against PPO with an adaptive KL penalty, sync mode",
    "breakout-factors": "Breakout: CleanRL's settings against one of Sample Factory's or "
    "SB3's settings at a time",
}


def render_markdown(doc: dict[str, Any]) -> str:
    m = doc.get("machine", {})
    arms = STUDIES[doc["study"]]["arms"]
    base = next(iter(arms))
    lines = [
        f"# {TITLES[doc['study']]}",
        "",
        f"`{'`, `'.join(doc.get('invocations', [])[-3:])}` on {m.get('cpus')} CPUs "
        f"({m.get('platform')}), last updated {doc.get('updated_at')}. Medians over seeds; "
        f"ratios are medians of per-seed ratios to {base} ({DEFAULT_ACTORS} actors) on the "
        "same seed. Arms: "
        + "; ".join(f"{a} = `{f}`" if f else f"{a} = the task's command" for a, f in arms.items())
        + "."
        + _concurrency_note(doc),
        "",
        "| task | arm | actors | seeds | reached | "
        + " | ".join(label for _, label, _ in FIGURES)
        + f" | command vs {base} | to target vs {base} | steps vs {base} |",
        "|---|---|---:|---:|---:|" + "---:|" * (len(FIGURES) + 3),
    ]
    for row in doc.get("summary", []):
        cells = [
            "–" if row.get(k) is None else fmt.format(row[k]) for k, _, fmt in FIGURES
        ]  # fmt: skip
        ratios = [
            "–" if row.get(f"{k}_vs_baseline") is None else f"{row[f'{k}_vs_baseline']:.2f}×"
            for k in ("command_s", "time_to_target_s", "solved_at_env_steps")
        ]
        reached = f"{row['reached']}/{row['seeds']}" if "reached" in row else "–"
        lines.append(
            f"| {row['task']} | {row['arm']} | {row['actors']} | {row['seeds']} | {reached} | "
            + " | ".join(cells + ratios)
            + " |"
        )
    lines += _returns_at_lines(doc)
    lines += ["", "## Every run", "", "| run | ok | command (s) | steps to target | final |"]
    lines.append("|---|---|---:|---:|---:|")
    for r in doc.get("runs", []):
        lines.append(
            f"| {r['task']}-{r['arm']}-a{r['actors']}-s{r['seed']} | "
            f"{'yes' if r.get('ok') else 'no: ' + str(r.get('error'))[:100]} | "
            f"{r.get('command_s', '–')} | {r.get('solved_at_env_steps') or '–'} | "
            f"{r.get('mean_return_20', '–')} |"
        )
    return "\n".join(lines) + "\n"


def _concurrency_note(doc: dict[str, Any]) -> str:
    most = max((r.get("concurrent", 1) for r in doc.get("runs", [])), default=1)
    if most == 1:
        return ""
    return (
        f" Up to {most} runs went at once on this machine, so command times and SPS say "
        "how they shared it, not what one run takes: compare the returns at equal steps."
    )


def _returns_at_lines(doc: dict[str, Any]) -> list[str]:
    """Where the task has marks: the mean return of the last 20 games at each, per run and
    the median per arm."""
    rows = [r for r in doc.get("summary", []) if r.get("return_at")]
    if not rows:
        return []
    marks = list(rows[0]["return_at"])
    head = " | ".join(f"at {int(m):,} steps" for m in marks)
    lines = ["", "Mean return of the last 20 games as it stood at each step count:", "",
             f"| task | arm | seed | {head} |", "|---|---|---|" + "---:|" * len(marks)]  # fmt: skip

    def cells(values: dict[str, Any]) -> str:
        return " | ".join("–" if values.get(m) is None else f"{values[m]:.1f}" for m in marks)

    for row in rows:
        for r in sorted(
            (r for r in doc["runs"] if r.get("ok") and r["arm"] == row["arm"]
             and r["task"] == row["task"]), key=lambda r: r["seed"],
        ):  # fmt: skip
            lines.append(f"| {r['task']} | {r['arm']} | {r['seed']} | {cells(r['return_at'])} |")
        lines.append(f"| {row['task']} | **{row['arm']}** | median | {cells(row['return_at'])} |")
    return lines


def result_path(out: Path, study: str, ext: str) -> Path:
    return out / f"variants_{study.replace('-', '_')}.{ext}"


def save(doc: dict[str, Any], out: Path, bench_run: harness.Run) -> None:
    doc["summary"] = summarise(doc["runs"])
    doc["updated_at"] = harness.utc_now()
    doc["machine"] = harness.machine()
    harness.write_json(result_path(out, doc["study"], "json"), doc, bench_run)
    harness.write_markdown(result_path(out, doc["study"], "md"), render_markdown(doc))
    if doc["study"] == "objective":
        plot_kl(doc, result_path(out, doc["study"], "png"))


@plot_style.styled
def plot_kl(doc: dict[str, Any], path: Path) -> None:
    """Per task: approx_kl and clip fraction against env steps, one line per arm and seed
    (the arm told by its colour, in one legend below the axes)."""
    runs = [r for r in doc["runs"] if r.get("ok") and r.get("kl_curve")]
    tasks = [t for t in TASKS if any(r["task"] == t for r in runs)]
    if not tasks:
        return
    from matplotlib.lines import Line2D

    fig, axes = plot_style.figure(len(tasks), 2, 4)
    arms = list(STUDIES[doc["study"]]["arms"])
    for (ax_kl, ax_cf), task in zip(axes, tasks, strict=True):
        for r in (r for r in runs if r["task"] == task):
            kw = {"color": f"C{arms.index(r['arm'])}", "lw": 0.8, "alpha": 0.8}
            pts = r["kl_curve"]
            ax_kl.plot([p[0] for p in pts], [p[1] for p in pts], **kw)
            ax_cf.plot([p[0] for p in pts], [p[2] for p in pts], **kw)
        ax_kl.set_title(f"{TASKS[task]['env_id']}: approx KL per update")
        ax_cf.set_title("clip fraction per update")
        for ax in (ax_kl, ax_cf):
            ax.set_xlabel("env steps")
            ax.grid(alpha=0.3)
    drawn = sorted({r["arm"] for r in runs}, key=arms.index)
    handles = [Line2D([], [], color=f"C{arms.index(a)}", lw=2, label=a) for a in drawn]
    plot_style.legend_below(fig, handles, ncols=min(4, len(handles)))
    plot_style.save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.variants", description=__doc__)
    p.add_argument("study", choices=list(STUDIES))
    p.add_argument("--tasks", help="comma-separated (default: the study's)")
    p.add_argument("--arms", help="comma-separated (default: the study's)")
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--scan", action="store_true", help="also runahead-vtrace at 1 and 4 actors")
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument("--workdir", type=Path, default=WORKDIR)
    harness.add_lock_option(p, default=harness.LOCK_PATH)
    p.add_argument("--timeout-s", type=float, default=3600.0)
    p.add_argument("--task-flags", default="", help="ppomq flags after the task's own")
    p.add_argument("--marks", help="env steps to read the return at (default: the task's)")
    p.add_argument(
        "--concurrent",
        type=int,
        default=1,
        help="runs at once, without the bench lock (a many-core machine: returns at equal "
        "steps compare, command times do not)",
    )
    args = p.parse_args(argv)
    bench_run = harness.Run("variants", argv)
    study = STUDIES[args.study]
    tasks = learning._csv_list(args.tasks) if args.tasks else list(study["tasks"])
    arms = learning._csv_list(args.arms) if args.arms else list(study["arms"])
    unknown = sorted(set(tasks) - set(TASKS)) + sorted(set(arms) - set(study["arms"]))
    if unknown:
        print(f"benchmarks.variants: unknown task or arm {unknown}; tasks: "
              f"{', '.join(TASKS)}; arms: {', '.join(study['arms'])}", file=sys.stderr)  # fmt: skip
        return 2
    jobs = plan(tasks, arms, [int(s) for s in learning._csv_list(args.seeds)], args.scan)
    path = result_path(args.out, args.study, "json")
    doc = json.loads(path.read_text()) if path.exists() else {"runs": [], "invocations": []}
    doc["study"] = args.study
    doc["invocations"] = [*doc["invocations"], harness.command_line("variants", argv)]
    done = {(r["task"], r["arm"], r["actors"], r["seed"]) for r in doc["runs"] if r.get("ok")}
    todo = [j for j in jobs if j.key not in done]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} runs already recorded; {len(todo)} to run")
    workdir = args.workdir.resolve()
    marks = tuple(int(m) for m in learning._csv_list(args.marks)) if args.marks else ()
    concurrent = max(1, args.concurrent)
    lock = (args.lock or None) if concurrent == 1 else None
    saving = threading.Lock()

    def one(n: int, job: Job) -> None:
        print(f"[{n}/{len(todo)}] {job.name} ...", flush=True)
        rec = run_job(job, workdir, lock, args.timeout_s, task_flags=args.task_flags, marks=marks)
        rec["concurrent"] = concurrent
        with saving:
            doc["runs"] = [
                r for r in doc["runs"] if (r["task"], r["arm"], r["actors"], r["seed"]) != job.key
            ] + [rec]
            save(doc, args.out, bench_run)
        print(f"    {job.name}: {'ok' if rec['ok'] else 'FAILED: ' + str(rec['error'])[:200]}",
              flush=True)  # fmt: skip

    with ThreadPoolExecutor(max_workers=concurrent) as pool:
        for future in [pool.submit(one, n, job) for n, job in enumerate(todo, 1)]:
            future.result()
    return 0 if all(r.get("ok") for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
