"""Learning and speed against peers: MuJoCo and Atari; memory.

    .venv/bin/python -m benchmarks.learning learning       # ppomq: HalfCheetah, Hopper,
                                                         # Walker2d (-v5), seeds 1,2,3, 1M steps
    .venv/bin/python -m benchmarks.learning side-by-side   # HalfCheetah-v5, ppomq vs CleanRL vs
                                                         # SB3 vs Sample Factory, seeds 1,2,
                                                         # 1M steps
    .venv/bin/python -m benchmarks.learning atari          # BreakoutNoFrameskip-v4, ppomq
                                                         # (seeds 1,2) vs SB3 vs Sample
                                                         # Factory, 1M steps
    .venv/bin/python -m benchmarks.learning memory         # ppomq/MaskedCartPole-v1, --arch
                                                         # lstm vs mlp, seeds 1,2,3, 500k steps
    flags: --total-steps N --seeds 1,2 --tasks A,B --contenders ppomq,sb3 --out DIR
           --ppomq-cmd TEMPLATE --cleanrl-python PATH --sf-python PATH --no-resume --lock PATH

Each run is its own command, timed from just before the fork to its exit (the figure a user
waits for), one at a time under an exclusive flock on /tmp/ppomq-bench.lock (others' benchmarks
take it too); the 1-, 5- and 15-minute load averages are recorded before and after each run.
Side by side and on Atari, the order of the contenders rotates with the seed (seed index 0:
ppomq, CleanRL, SB3; index 1: CleanRL, SB3, ppomq; ...), so that a drift in the machine's load
falls on all.

The contenders:
- ppomq: `--ppomq-cmd`, a template of {env_id} {total_steps} {seed} {run_dir}
  {eval_episodes} (default DEFAULT_PPOMQ_CMD: the mujoco preset, 2 actors, async); figures from
  the run dir's summary.json (final_mean_return_20, final_eval_return) and episodes.csv.
- cleanrl: CleanRL 1.2.0's published ppo_continuous_action.py, unmodified, in its own venv
  (bash benchmarks/contenders/cleanrl_setup.sh; runner: contenders/cleanrl_mujoco.py). Its
  gymnasium (0.28) has the tasks as -v4 only, so it runs -v4 where the others run -v5 (same
  model and reward for HalfCheetah); every record names the env it ran.
- sb3: Stable-Baselines3 PPO with CleanRL's settings and VecNormalize
  (contenders/sb3_mujoco.py, from .venv's `bench` extra).
- sf: Sample Factory 2.1.1's own MuJoCo example with its own settings (8 workers x 8 envs),
  in its own venv (bash benchmarks/contenders/sf_setup.sh; runner: contenders/sf_mujoco.py);
  like CleanRL it runs -v4, and it is compared on its training return (no greedy eval).

On Atari (`atari` mode): ppomq runs `--preset atari` with a 2-thread learner
(DEFAULT_ATARI_PPOMQ_CMD; the learner is the bottleneck there, benchmarks/results/
atari_system.md); SB3 runs the RL Zoo's Atari settings (contenders/sb3_atari.py; .venv with
the `bench` and `atari` extras); Sample Factory 2.1.1 runs its own Atari example in its own
venv (bash benchmarks/contenders/sf_setup.sh; runner: contenders/sf_atari.py). Every return
is a whole game's raw score; no greedy evaluation (the comparison is the training return).

Memory (`memory` mode): CartPole with its velocities masked (ppomq/MaskedCartPole-v1), ppomq
with `--arch lstm` against the same command with the MLP (PPOMQ_VARIANTS), each run ending
when the mean of the last 20 training episodes reaches 475 or at the step cap.

Figures per run: command_s (command to exit), to_n_steps_s (command to the last training
step), SPS = env steps / to_n_steps_s, final return = mean of the last 20 training episodes,
eval = mean of a 10-episode greedy evaluation with frozen normalization statistics.

Results: OUT/mujoco_{learning,side_by_side}.{json,md,png}, OUT/atari_learning.* and
OUT/masked_cartpole.*,
rewritten after every run, so a run that finished is never lost; a second invocation skips
the runs already recorded as ok for the same mode, task, contender, seed and step count
(--no-resume runs them again). Run dirs
go under runs/bench-learning/ (--workdir).
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness, plot_style
from benchmarks.contenders.common import thin

WORKDIR = harness.REPO / "runs" / "bench-learning"

LEARNING_TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
SIDE_BY_SIDE_TASKS = ("HalfCheetah-v5",)
ATARI_TASKS = ("BreakoutNoFrameskip-v4",)
MEMORY_TASKS = ("ppomq/MaskedCartPole-v1",)
MEMORY_TARGET = 475.0
# ppomq under other settings, as contenders of their own: {name: command template}. The
# memory task's settings are rl-baselines3-zoo's for RecurrentPPO on CartPoleNoVel-v1 (8 envs
# x 32 steps, an LSTM of 64 on a 64-unit layer; the rest is ppomq's CartPole default, which
# is the zoo's too); the MLP runs the same command with --arch mlp.
_MEMORY_CMD = (
    ".venv/bin/ppomq train --env-id {env_id} --arch ARCH --lstm-size 64 --hidden-sizes 64 "
    "--actors 1 --num-envs 8 --num-steps 32 --total-steps {total_steps} --target-return "
    f"{MEMORY_TARGET:g} --seed {{seed}} --run-dir {{run_dir}} --eval-episodes {{eval_episodes}}"
)
PPOMQ_VARIANTS = {
    "ppomq-lstm": _MEMORY_CMD.replace("ARCH", "lstm"),
    "ppomq-mlp": _MEMORY_CMD.replace("ARCH", "mlp"),
    # the mujoco-fast preset (Sample Factory's gradient work, CleanRL's model).
    "ppomq-fast": (
        ".venv/bin/ppomq train --preset mujoco-fast --env-id {env_id} --total-steps "
        "{total_steps} --seed {seed} --run-dir {run_dir} --eval-episodes {eval_episodes}"
    ),
}
CONTENDERS = ("ppomq", *PPOMQ_VARIANTS, "cleanrl", "sb3", "sf")
LABELS = {
    "ppomq": "ppomq",
    "ppomq-lstm": "ppomq LSTM",
    "ppomq-mlp": "ppomq MLP",
    "ppomq-fast": "ppomq mujoco-fast",
    "cleanrl": "CleanRL",
    "sb3": "SB3",
    "sf": "Sample Factory",
}
MODES: dict[str, dict[str, Any]] = {
    "learning": {"tasks": LEARNING_TASKS, "seeds": (1, 2, 3), "contenders": ("ppomq",)},
    "side-by-side": {
        "tasks": SIDE_BY_SIDE_TASKS,
        "seeds": (1, 2),
        "contenders": ("ppomq", "cleanrl", "sb3", "sf"),
    },
    # SB3 takes over an hour per 1M steps here, so it runs seed 1 only (--seeds).
    "atari": {"tasks": ATARI_TASKS, "seeds": (1, 2), "contenders": ("ppomq", "sb3", "sf")},
    "memory": {
        "tasks": MEMORY_TASKS,
        "seeds": (1, 2, 3),
        "contenders": ("ppomq-lstm", "ppomq-mlp"),
        "total_steps": 500_000,
    },
}
ROTATING_MODES = ("side-by-side", "atari", "memory")
DEFAULT_TOTAL_STEPS = 1_000_000
EVAL_EPISODES = 10
DEFAULT_PPOMQ_CMD = (
    ".venv/bin/ppomq train --preset mujoco --env-id {env_id} --total-steps {total_steps} "
    "--seed {seed} --run-dir {run_dir} --eval-episodes {eval_episodes}"
)
DEFAULT_ATARI_PPOMQ_CMD = (
    ".venv/bin/ppomq train --preset atari --env-id {env_id} --total-steps {total_steps} "
    "--seed {seed} --run-dir {run_dir} --eval-episodes {eval_episodes} --torch-threads 2"
)
# CleanRL's published ppo_continuous_action returns at 1M steps on the -v4 tasks
# quotes them (docs.cleanrl.dev, ppo_continuous_action.py): the learning mode's bar.
CLEANRL_PUBLISHED_1M = {"HalfCheetah": 1440.0, "Hopper": 2380.0, "Walker2d": 2290.0}
GOAL_RATIO = 0.5  # the goal checked against each peer: ppomq at most half its wall time
MEAN_WINDOW = 20
CURVE_POINTS = 500  # per run in the JSON: enough for a plot, small enough to commit
KEY_FIELDS = ("mode", "task", "contender", "seed", "total_steps")


class BenchError(Exception):
    """A setup problem the user fixes (a missing venv); one line, exit 2."""


# --- what runs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    mode: str
    task: str
    contender: str
    seed: int
    total_steps: int

    @property
    def key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in KEY_FIELDS)

    @property
    def name(self) -> str:
        return f"{self.task}-{self.contender}-s{self.seed}-n{self.total_steps}"


def record_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(rec[f] for f in KEY_FIELDS)


def plan(
    mode: str, tasks: list[str], contenders: list[str], seeds: list[int], total_steps: int
) -> list[Job]:
    """Seeds outermost, so that an interrupted benchmark has every task and contender on its
    first seeds; side by side, the contenders' order rotates with the seed's index."""
    jobs = []
    for i, seed in enumerate(seeds):
        shift = i % len(contenders) if mode in ROTATING_MODES else 0
        order = contenders[shift:] + contenders[:shift]
        for task in tasks:
            jobs += [Job(mode, task, c, seed, total_steps) for c in order]
    return jobs


def pending(jobs: list[Job], runs: list[dict[str, Any]], resume: bool) -> list[Job]:
    """The jobs still to run: with `resume`, those without an ok record."""
    done = {record_key(r) for r in runs if r.get("ok")} if resume else set()
    return [j for j in jobs if j.key not in done]


def family(mode: str) -> str:
    """Which runners a mode's peers use: contenders/{peer}_{family}.py."""
    return "atari" if mode == "atari" else "mujoco"


def env_for(contender: str, task: str) -> str:
    """The env id a contender can run: CleanRL's gymnasium 0.28 and Sample Factory's 0.29
    have only the -v4 tasks."""
    if contender in ("cleanrl", "sf") and task.endswith("-v5"):
        return task[: -len("-v5")] + "-v4"
    return task


# The distribution whose version a peer's record names (CleanRL is scripts, not a package:
# its venv's torch stands for it).
PEER_DISTRIBUTIONS = {"sf": "sample-factory", "sb3": "stable-baselines3", "cleanrl": "torch"}


@dataclass
class Tools:
    """How each contender is started (from the command line)."""

    ppomq_cmd: str = DEFAULT_PPOMQ_CMD
    cleanrl_python: str = str(harness.REPO / ".venv-cleanrl" / "bin" / "python")
    sb3_python: str = sys.executable
    sf_python: str = str(harness.REPO / ".venv-sf" / "bin" / "python")
    eval_episodes: int = EVAL_EPISODES

    def python(self, contender: str) -> str:
        return {"cleanrl": self.cleanrl_python, "sf": self.sf_python}.get(
            contender, self.sb3_python
        )


def command(job: Job, run_dir: Path, tools: Tools) -> list[str]:
    env_id = env_for(job.contender, job.task)
    fields = {
        "env_id": env_id,
        "total_steps": job.total_steps,
        "seed": job.seed,
        "run_dir": str(run_dir),
        "eval_episodes": tools.eval_episodes,
    }
    if is_ppomq(job.contender):
        template = PPOMQ_VARIANTS.get(job.contender, tools.ppomq_cmd)
        return shlex.split(template.format(**fields))
    module = f"benchmarks.contenders.{job.contender}_{family(job.mode)}"
    return [
        tools.python(job.contender),
        "-m",
        module,
        "--env-id",
        env_id,
        "--total-steps",
        str(job.total_steps),
        "--seed",
        str(job.seed),
        "--run-dir",
        str(run_dir),
        "--eval-episodes",
        # Sample Factory is compared on its training return (no greedy evaluation).
        str(0 if job.contender == "sf" else tools.eval_episodes),
    ]


def is_ppomq(contender: str) -> bool:
    return contender == "ppomq" or contender in PPOMQ_VARIANTS


def check_tools(contenders: list[str], tools: Tools, mode: str = "side-by-side") -> None:
    """Fail before the first hour-long run, not after it."""
    for c in filter(is_ppomq, contenders):
        template = PPOMQ_VARIANTS.get(c, tools.ppomq_cmd)
        exe = shlex.split(template)[0] if template.strip() else ""
        if not ((harness.REPO / exe).exists() or shutil.which(exe)):
            raise BenchError(
                f"{c}'s command starts {exe!r}, which is neither under {harness.REPO} nor on PATH"
            )
    if "cleanrl" in contenders and not Path(tools.cleanrl_python).exists():
        raise BenchError(
            f"no CleanRL venv at {tools.cleanrl_python}: run "
            "`bash benchmarks/contenders/cleanrl_setup.sh` (or pass --cleanrl-python)"
        )
    if "sf" in contenders and not Path(tools.sf_python).exists():
        raise BenchError(
            f"no Sample Factory venv at {tools.sf_python}: run "
            "`bash benchmarks/contenders/sf_setup.sh` (or pass --sf-python)"
        )
    if "sb3" in contenders:
        extra = family(mode)
        sim = "ale_py" if extra == "atari" else "mujoco"
        probe = [tools.sb3_python, "-c", f"import stable_baselines3, {sim}"]
        if subprocess.run(probe, capture_output=True).returncode != 0:
            raise BenchError(
                f"{tools.sb3_python} lacks stable_baselines3 or {sim}: "
                f"`.venv/bin/pip install -e '.[bench,{extra}]'`"
            )


# --- running one --------------------------------------------------------------------------


def run_job(job: Job, tools: Tools, workdir: Path, lock: str | None, timeout_s: float) -> dict:
    """One run, under the lock, as a result record (ok False, with the error, on failure)."""
    run_dir = workdir / job.mode / job.name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    argv = command(job, run_dir, tools)
    rec: dict[str, Any] = {f: getattr(job, f) for f in KEY_FIELDS}
    rec.update(
        env_id=env_for(job.contender, job.task),
        run_dir=str(run_dir),
        ok=False,
        started_at=harness.utc_now(),
    )
    with harness.BenchLock(lock) as fl:
        proc = harness.run_command(argv, run_dir, timeout_s)
    rec["lock_wait_s"] = fl.waited_s
    t_cmd = proc.pop("t_cmd")
    rec.update(proc)
    if rec["error"] is None:
        try:
            collect = collect_ppomq if is_ppomq(job.contender) else collect_peer
            rec.update(collect(run_dir, t_cmd))
            rec["train_sps"] = train_sps(rec)
            rec["ok"] = True
        except (OSError, ValueError, KeyError, TypeError) as exc:
            rec["error"] = f"could not read the results: {exc!r}"
    return rec


# --- reading a run's results ----------------------------------------------------------------


def curve(episodes: list[tuple[int, float, float]], t_cmd: float) -> list[list[float]]:
    """[[env_steps, s since the command, return, mean of the last 20]], thinned after the
    running mean is taken (so the mean is over every episode)."""
    rows, window = [], []
    for steps, unix, ret in episodes:
        window = [*window[-(MEAN_WINDOW - 1) :], ret]
        rows.append(
            [int(steps), round(unix - t_cmd, 2), round(ret, 2), round(sum(window) / len(window), 2)]
        )
    return thin(rows, CURVE_POINTS)


def sps(env_steps: int, seconds: float | None) -> float | None:
    return round(env_steps / seconds, 1) if seconds else None


def train_sps(rec: dict[str, Any]) -> float | None:
    """SPS from the first env step to the last: the speed once started (a short run's
    whole-process SPS is mostly interpreter and import time)."""
    start, end = rec.get("startup_s"), rec.get("to_n_steps_s")
    return sps(rec["env_steps"], end - start) if start is not None and end else None


def collect_peer(run_dir: Path, t_cmd: float) -> dict[str, Any]:
    """The figures of a CleanRL or SB3 run from its result.json (mujoco_common)."""
    doc = json.loads((run_dir / "result.json").read_text())
    to_n = round(doc["train_end_unix"] - t_cmd, 3)
    return {
        "env_id": doc["env_id"],
        "env_steps": doc["env_steps"],
        "to_n_steps_s": to_n,
        "startup_s": round(doc["first_step_unix"] - t_cmd, 3),
        "sps": sps(doc["env_steps"], to_n),
        "mean_return_20": doc["mean_return_20"],
        "eval_return": doc["eval_return"],
        "episodes": len(doc["episodes"]),
        "torch_threads": doc.get("torch_threads"),
        "versions": doc.get("versions"),
        "curve": curve([tuple(e) for e in doc["episodes"]], t_cmd),
    }


def _ppomq_episodes(run_dir: Path, learner_t0: float) -> list[tuple[int, float, float]]:
    with open(run_dir / "episodes.csv", newline="") as fh:
        return [
            (int(r["env_steps"]), learner_t0 + float(r["wall_s"]), float(r["return"]))
            for r in csv.DictReader(fh)
        ]


def _ppomq_last_update(run_dir: Path, summary: dict[str, Any], learner_t0: float) -> float:
    """Unix time of the last update (progress.csv's last row; else the summary's end,
    which comes after the evaluation)."""
    try:
        with open(run_dir / "progress.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        return learner_t0 + float(rows[-1]["wall_s"])
    except (OSError, IndexError, KeyError, ValueError):
        return learner_t0 + float(summary["wall_seconds"])


def _ppomq_startup(run_dir: Path, t_cmd: float) -> float | None:
    """Command to the first env step any actor took (its events, ppomq.core.timeline)."""
    from ppomq.core.timeline import first_env_step_unix

    first = first_env_step_unix(run_dir)
    return None if first is None else round(first - t_cmd, 3)


def collect_ppomq(run_dir: Path, t_cmd: float) -> dict[str, Any]:
    """The figures of a `ppomq train` run from its run dir (summary.json, episodes.csv,
    progress.csv); the learner's clock is turned into Unix time with `started_unix`."""
    s = json.loads((run_dir / "summary.json").read_text())
    learner_t0 = float(s["started_unix"]) - float(s.get("resumed_wall_s") or 0.0)
    episodes = _ppomq_episodes(run_dir, learner_t0)
    to_n = round(_ppomq_last_update(run_dir, s, learner_t0) - t_cmd, 3)
    return {
        "env_id": s.get("env_id"),
        "env_steps": int(s["total_env_steps"]),
        "to_n_steps_s": to_n,
        "startup_s": _ppomq_startup(run_dir, t_cmd),
        "sps": sps(int(s["total_env_steps"]), to_n),
        "mean_return_20": s.get("final_mean_return_20"),
        "eval_return": s.get("final_eval_return"),
        "solved_at_env_steps": s.get("solved_at_env_steps"),
        "episodes": len(episodes),
        "actors": s.get("actors"),
        "mode_ppomq": s.get("mode"),
        "curve": curve(episodes, t_cmd),
    }


# --- summarising ------------------------------------------------------------------------------


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


def _mean_sd(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return round(statistics.fmean(vals), 1), round(sd, 1)


def groups(runs: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, list[dict]]]:
    """Ok runs by (task, total_steps), then by contender."""
    out: dict[tuple[str, int], dict[str, list[dict]]] = {}
    for r in runs:
        if r.get("ok"):
            by = out.setdefault((r["task"], r["total_steps"]), {})
            by.setdefault(r["contender"], []).append(r)
    return out


def summarise_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per contender: medians of the times over seeds, mean +- sd of the returns."""
    ret, ev = (
        _mean_sd([r["mean_return_20"] for r in runs]),
        _mean_sd([r["eval_return"] for r in runs]),
    )
    return {
        "seeds": sorted(r["seed"] for r in runs),
        "env_id": sorted({r["env_id"] for r in runs}),
        "command_s": _median([r["command_s"] for r in runs]),
        "to_n_steps_s": _median([r["to_n_steps_s"] for r in runs]),
        "sps": _median([r["sps"] for r in runs]),
        "train_sps": _median([r.get("train_sps") for r in runs]),
        "env_steps": _median([r["env_steps"] for r in runs]),
        "mean_return_20": ret[0],
        "mean_return_20_sd": ret[1],
        "median_return_20": _median([r["mean_return_20"] for r in runs]),
        "eval_return": ev[0],
        "eval_return_sd": ev[1],
    }


def wall_ratios(by_contender: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """For each ordered pair (a, b): a's command time over b's, as the ratio of the medians
    and as the median of the per-seed ratios (same seed, run back to back)."""
    out: dict[str, dict[str, Any]] = {}
    for a, runs_a in by_contender.items():
        for b, runs_b in by_contender.items():
            if a == b:
                continue
            seed_b = {r["seed"]: r["command_s"] for r in runs_b}
            per_seed = [r["command_s"] / seed_b[r["seed"]] for r in runs_a if r["seed"] in seed_b]
            ma = _median([r["command_s"] for r in runs_a])
            mb = _median([r["command_s"] for r in runs_b])
            out[f"{a}/{b}"] = {
                "ratio_of_medians": round(ma / mb, 3) if ma and mb else None,
                "median_per_seed": _median(per_seed),
                "pairs": len(per_seed),
            }
    return out


def _ordered(by_contender: dict[str, Any]) -> list[str]:
    """ppomq first, then the peers, in CONTENDERS' order (tables read row over column)."""
    return sorted(by_contender, key=lambda c: (CONTENDERS.index(c) if c in CONTENDERS else 99, c))


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (task, total_steps): each contender's summary and the wall ratios."""
    out = []
    for (task, steps), by in sorted(groups(runs).items()):
        out.append(
            {
                "task": task,
                "total_steps": steps,
                "contenders": {c: summarise_runs(by[c]) for c in _ordered(by)},
                "ratios": wall_ratios(by),
            }
        )
    return out


def merge(runs: list[dict[str, Any]], rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs with `rec` in place of any earlier record of the same job."""
    return [r for r in runs if record_key(r) != record_key(rec)] + [rec]


# --- writing ------------------------------------------------------------------------------------


def result_paths(out: Path, mode: str) -> dict[str, Path]:
    stems = {"atari": "atari_learning", "memory": "masked_cartpole"}
    stem = stems.get(mode) or "mujoco_" + mode.replace("-", "_")
    return {ext: out / f"{stem}.{ext}" for ext in ("json", "md", "png")}


def load_doc(path: Path, mode: str) -> dict[str, Any]:
    if path.exists():
        doc = json.loads(path.read_text())
        if doc.get("mode") != mode:
            raise BenchError(f"{path} holds mode {doc.get('mode')!r}, not {mode!r}")
        return doc
    name = "atari-learning" if mode == "atari" else f"mujoco-{mode}"
    return {"benchmark": name, "mode": mode, "runs": [], "invocations": []}


def save(doc: dict[str, Any], out: Path, bench_run: harness.Run) -> dict[str, Path]:
    """Recompute the summary and rewrite the JSON, the table and the curves."""
    out.mkdir(parents=True, exist_ok=True)
    paths = result_paths(out, doc["mode"])
    doc["summary"] = summarise(doc["runs"])
    doc["machine"] = harness.machine()
    doc["updated_at"] = harness.utc_now()
    harness.write_results(out, paths["json"].stem, doc, render_markdown(doc), bench_run)
    if plot(doc, paths["png"]) is None:
        paths.pop("png")
    return paths


def _f(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if value is None else fmt.format(value)


def _pm(mean: float | None, sd: float | None) -> str:
    return "–" if mean is None else f"{mean:,.0f} ± {sd or 0:,.0f}"


def _contender_table(entry: dict[str, Any]) -> list[str]:
    lines = [
        "| contender | env | seeds | command to exit (s) | to N steps (s) | SPS | "
        f"final return (last {MEAN_WINDOW}) | greedy eval ({EVAL_EPISODES} ep) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c, s in entry["contenders"].items():
        lines.append(
            f"| {LABELS.get(c, c)} | {', '.join(s['env_id'])} | {len(s['seeds'])} | "
            f"{_f(s['command_s'], '{:,.1f}')} | {_f(s['to_n_steps_s'], '{:,.1f}')} | "
            f"{_f(s['sps'])} | {_pm(s['mean_return_20'], s['mean_return_20_sd'])} | "
            f"{_pm(s['eval_return'], s['eval_return_sd'])} |"
        )
    return lines


def _ratio_lines(entry: dict[str, Any]) -> list[str]:
    ratios = entry["ratios"]
    if not ratios:
        return []
    lines = [
        "",
        "Wall time (command to exit), row over column: median of the per-seed "
        "ratios (ratio of the medians).",
        "",
        "| | " + " | ".join(LABELS.get(c, c) for c in entry["contenders"]) + " |",
        "|---" * (len(entry["contenders"]) + 1) + "|",
    ]
    for a in entry["contenders"]:
        cells = []
        for b in entry["contenders"]:
            r = ratios.get(f"{a}/{b}")
            cells.append(
                "–"
                if r is None
                else f"{_f(r['median_per_seed'], '{:.2f}')}x "
                f"({_f(r['ratio_of_medians'], '{:.2f}')}x)"
            )
        lines.append(f"| {LABELS.get(a, a)} | " + " | ".join(cells) + " |")
    return lines


def _goal_lines(entry: dict[str, Any]) -> list[str]:
    """The side-by-side goal: ppomq at least 2x faster than each peer, at equal or
    better final return."""
    cs = entry["contenders"]
    if "ppomq" not in cs:
        return []
    lines = []
    for peer in (c for c in cs if not is_ppomq(c)):
        r = entry["ratios"][f"ppomq/{peer}"]["median_per_seed"]
        a, b = cs["ppomq"]["mean_return_20"], cs[peer]["mean_return_20"]
        fast = r is not None and r <= GOAL_RATIO
        good = a is not None and b is not None and a >= b
        lines.append(
            f"- against {LABELS.get(peer, peer)}: wall {_f(r, '{:.2f}')}x "
            f"(goal <= {GOAL_RATIO}) {'met' if fast else 'not met'}; final return "
            f"{_f(a)} vs {_f(b)} {'(>=, met)' if good else '(below)'}"
        )
    return ["", "Goal:", "", *lines, *_sf_goal_lines(entry)]


def _sf_goal_lines(entry: dict[str, Any]) -> list[str]:
    """The goal: ppomq faster than Sample Factory from command to exit at 1M steps,
    at least at its return (here: the median over seeds, and the mean, whose spread the
    table shows), for each ppomq contender that ran."""
    cs = entry["contenders"]
    if "sf" not in cs:
        return []
    lines = []
    for c in (c for c in cs if is_ppomq(c)):
        r = entry["ratios"][f"{c}/sf"]["median_per_seed"]
        verdicts = []
        for key, what in (("median_return_20", "median"), ("mean_return_20", "mean")):
            a, b = cs[c].get(key), cs["sf"].get(key)
            ok = a is not None and b is not None and a >= b
            verdicts.append(f"{what} {_f(a)} vs {_f(b)} {'(>=, met)' if ok else '(below)'}")
        lines.append(
            f"- {LABELS.get(c, c)}: wall {_f(r, '{:.2f}')}x Sample Factory's "
            f"({'faster, met' if r is not None and r < 1 else 'not faster'}); final return "
            + ", ".join(verdicts)
        )
    return ["", "Goal, against Sample Factory:", "", *lines]


def time_to(curve_rows: list[list[float]], target: float) -> float | None:
    """Seconds from the command until the running mean of the last 20 episodes first
    reached `target` (None: never)."""
    return next((row[1] for row in curve_rows if row[3] >= target), None)


def _atari_goal_lines(entry: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """The goal: ppomq's return at the end at least SB3's in at most half SB3's wall
    time, and faster than Sample Factory to the same return (the lower of the two finals:
    the return both reached; times are medians over seeds)."""
    cs = entry["contenders"]
    if "ppomq" not in cs:
        return []
    lines = []
    if "sb3" in cs:
        r = entry["ratios"]["ppomq/sb3"]["median_per_seed"]
        a, b = cs["ppomq"]["mean_return_20"], cs["sb3"]["mean_return_20"]
        fast = r is not None and r <= GOAL_RATIO
        good = a is not None and b is not None and a >= b
        lines.append(
            f"- against SB3: wall {_f(r, '{:.2f}')}x (goal <= {GOAL_RATIO}) "
            f"{'met' if fast else 'not met'}; final return {_f(a, '{:.1f}')} vs "
            f"{_f(b, '{:.1f}')} {'(>=, met)' if good else '(below: not met)'}"
        )
    if "sf" in cs:
        a, b = cs["ppomq"]["mean_return_20"], cs["sf"]["mean_return_20"]
        if a is not None and b is not None:
            target = min(a, b)
            key = (entry["task"], entry["total_steps"])
            own = [r for r in runs if r.get("ok") and (r["task"], r["total_steps"]) == key]
            times = {
                c: [time_to(r["curve"], target) for r in own if r["contender"] == c]
                for c in ("ppomq", "sf")
            }
            t_p, t_s = _median(times["ppomq"]), _median(times["sf"])
            reached = {
                c: f"{sum(t is not None for t in ts)} of {len(ts)} seeds" for c, ts in times.items()
            }
            met = t_p is not None and (t_s is None or t_p < t_s)
            lines.append(
                f"- against Sample Factory: to a return of {target:.1f} (the lower final; median "
                f"over the seeds that reached it), ppomq {_f(t_p, '{:,.0f}')} s "
                f"({reached['ppomq']}) vs {_f(t_s, '{:,.0f}')} s ({reached['sf']}) from the "
                "command "
                f"({'faster: met' if met else 'not faster: not met'}); final return "
                f"{_f(a, '{:.1f}')} vs {_f(b, '{:.1f}')}"
            )
    return ["", "Goal:", "", *lines] if lines else []


def _memory_goal_lines(entry: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """The goal: the LSTM reaches 475 on the masked task and the MLP does not."""
    key = (entry["task"], entry["total_steps"])
    own = [r for r in runs if r.get("ok") and (r["task"], r["total_steps"]) == key]
    lines = []
    for c in entry["contenders"]:
        mine = [r for r in own if r["contender"] == c]
        steps = [r["solved_at_env_steps"] for r in mine if r.get("solved_at_env_steps")]
        best = [max((p[3] for p in r["curve"]), default=None) for r in mine]
        lines.append(
            f"- {LABELS.get(c, c)}: reached {MEMORY_TARGET:g} in {len(steps)} of {len(mine)} "
            f"seeds (at {', '.join(f'{s:,}' for s in sorted(steps)) or 'no'} env steps); best "
            f"running mean per seed {', '.join(_f(b) for b in best)}"
        )
    goal = f"Goal: the LSTM reaches {MEMORY_TARGET:g}, the MLP does not."
    return ["", goal, "", *lines]


def _vs(value: float | None, bar: float) -> str:
    return "–" if value is None else f"{value:,.0f} {'>=' if value >= bar else '<'} {bar:,.0f}"


def _published_lines(entry: dict[str, Any]) -> list[str]:
    """The learning bar: CleanRL's published 1M-step returns (on -v4)."""
    base = entry["task"].split("-")[0]
    bar = CLEANRL_PUBLISHED_1M.get(base)
    s = entry["contenders"].get("ppomq")
    if bar is None or s is None or entry["total_steps"] != DEFAULT_TOTAL_STEPS:
        return []
    return [
        "",
        f"Against CleanRL's published figure at 1M steps ({base}-v4, about {bar:,.0f}): "
        f"ppomq's final return {_vs(s['mean_return_20'], bar)}, greedy eval "
        f"{_vs(s['eval_return'], bar)}.",
    ]


def _runs_table(runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| task | steps | seed | contender | env | command (s) | start-up (s) | to N (s) | SPS | "
        "SPS after start-up | final | eval | load 1/5/15 before → after | ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        load = (
            f"{'/'.join(map(str, r.get('load_before', [])))} → "
            f"{'/'.join(map(str, r.get('load_after', [])))}"
        )
        lines.append(
            f"| {r['task']} | {r['total_steps']:,} | {r['seed']} | {LABELS.get(r['contender'])} | "
            f"{r.get('env_id')} | {_f(r.get('command_s'), '{:,.1f}')} | "
            f"{_f(r.get('startup_s'), '{:.1f}')} | {_f(r.get('to_n_steps_s'), '{:,.1f}')} | "
            f"{_f(r.get('sps'))} | {_f(r.get('train_sps'))} | "
            f"{_f(r.get('mean_return_20'))} | {_f(r.get('eval_return'))} | {load} | "
            f"{'yes' if r.get('ok') else 'no: ' + str(r.get('error', ''))[:120]} |"
        )
    return lines


def render_markdown(doc: dict[str, Any]) -> str:
    titles = {
        "learning": "ppomq on MuJoCo",
        "side-by-side": "MuJoCo side by side",
        "atari": "Atari side by side",
        "memory": "Memory: CartPole without velocities, LSTM against MLP",
    }
    m = doc.get("machine", {})
    lines = [
        f"# {titles[doc['mode']]}",
        "",
        f"`{'`, `'.join(doc.get('invocations', [])[-3:])}` on {m.get('cpus')} CPUs "
        f"({m.get('platform')}, Python {m.get('python')}), last updated {doc.get('updated_at')}. "
        "Each run is its own command, timed from the command to its exit, one at a time under "
        "the bench lock (side by side, the contenders' order rotates with the seed); start-up "
        "= command to the first env step; SPS = env steps / time from the command to the last "
        f"training step; final return = mean of the last {MEAN_WINDOW} training episodes; "
        "times are medians over seeds, returns mean ± sd over seeds. ",
    ]
    if doc["mode"] == "atari":
        lines[-1] += (
            "Env steps are agent steps (4 frames each); returns are whole games' raw scores "
            "(every life, unclipped); no greedy evaluation."
        )
    elif doc["mode"] == "memory":
        lines[-1] += (
            f"Eval = {EVAL_EPISODES} greedy episodes, each from a zero recurrent state. A run "
            f"ends when its mean of the last 20 episodes reaches {MEMORY_TARGET:g} (`to N "
            "steps` is then the time to that point) or at the step cap."
        )
    else:
        lines[-1] += (
            f"Eval = {EVAL_EPISODES} greedy episodes with the normalization statistics frozen. "
            "CleanRL's published script runs the -v4 tasks (its gymnasium 0.28 has no -v5; "
            "HalfCheetah's model and reward are the same)."
        )
    for entry in doc.get("summary", []):
        lines += ["", f"## {entry['task']}, {entry['total_steps']:,} env steps", ""]
        lines += _contender_table(entry) + _ratio_lines(entry)
        if doc["mode"] == "side-by-side":
            lines += _goal_lines(entry)
        if doc["mode"] == "atari":
            lines += _atari_goal_lines(entry, doc["runs"])
        if doc["mode"] == "memory":
            lines += _memory_goal_lines(entry, doc["runs"])
        lines += _published_lines(entry)
    lines += ["", "## Every run", "", *_runs_table(doc["runs"]), ""]
    return "\n".join(lines)


@plot_style.styled
def plot(doc: dict[str, Any], path: Path) -> Path | None:
    """Per task, the mean of the last 20 training episodes against env steps and against
    seconds from the command's start; one line per contender and seed, the contender told
    by its colour and the seed by its line style (one legend for both, below the axes)."""
    entries = groups(doc["runs"])
    if not entries:
        return None
    from matplotlib.lines import Line2D

    fig, axes = plot_style.figure(len(entries), 2, 4.2)
    colors = {c: f"C{i}" for i, c in enumerate(CONTENDERS)}
    seeds = sorted({r["seed"] for by in entries.values() for rs in by.values() for r in rs})
    styles = {seed: plot_style.LINE_STYLES[i % len(plot_style.LINE_STYLES)]
              for i, seed in enumerate(seeds)}  # fmt: skip
    env_ids: dict[str, set[str]] = {}
    for (ax_s, ax_t), ((task, steps), by) in zip(axes, sorted(entries.items()), strict=True):
        for c in _ordered(by):
            for r in sorted(by[c], key=lambda r: r["seed"]):
                env_ids.setdefault(c, set()).add(r["env_id"])
                pts = r["curve"]
                kw = {"color": colors.get(c), "ls": styles[r["seed"]], "lw": 1.2}
                ax_s.plot([p[0] for p in pts], [p[3] for p in pts], **kw)
                ax_t.plot([p[1] for p in pts], [p[3] for p in pts], **kw)
        ax_s.set_title(f"{task}, {steps:,} steps: against env steps")
        ax_t.set_title("against wall time")
        ax_s.set_xlabel("env steps")
        ax_t.set_xlabel("seconds from the command's start")
        for ax in (ax_s, ax_t):
            ax.set_ylabel(f"mean return, last {MEAN_WINDOW} ep.")
            ax.grid(alpha=0.3)
    labels = {c: f"{LABELS.get(c, c)} ({', '.join(sorted(ids))})" for c, ids in env_ids.items()}
    handles = [Line2D([], [], color=colors.get(c), lw=2, label=labels[c]) for c in labels]
    handles += [
        Line2D([], [], color="gray", ls=styles[seed], label=f"seed {seed}") for seed in seeds
    ]
    plot_style.legend_below(fig, handles, ncols=3)
    return plot_style.save(fig, path)


# --- main -----------------------------------------------------------------------------------------


def _csv_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.learning", description=__doc__.splitlines()[0]
    )
    p.add_argument("mode", choices=sorted(MODES))
    p.add_argument("--total-steps", type=int, help="default: 1M (memory: 500k)")
    p.add_argument("--seeds", help="comma-separated (learning: 1,2,3; side-by-side: 1,2)")
    p.add_argument("--tasks", help="comma-separated env ids (default: the mode's)")
    p.add_argument("--contenders", help=f"comma-separated, from {','.join(CONTENDERS)}")
    p.add_argument("--out", type=Path, default=harness.RESULTS, help="where the results go")
    p.add_argument("--workdir", type=Path, default=WORKDIR, help="where run dirs go")
    p.add_argument(
        "--ppomq-cmd",
        help="template: {env_id} {total_steps} {seed} {run_dir} {eval_episodes} (default: "
        "the mujoco preset, or on Atari the atari preset with a 2-thread learner)",
    )
    p.add_argument("--cleanrl-python", default=Tools.cleanrl_python)
    p.add_argument("--sf-python", default=Tools.sf_python)
    harness.add_lock_option(p, default=harness.LOCK_PATH)
    p.add_argument("--timeout-s", type=float, default=4 * 3600.0, help="per run")
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="skip runs already recorded as ok (default)",
    )
    return p.parse_args(argv)


def jobs_from(args: argparse.Namespace) -> list[Job]:
    spec = MODES[args.mode]
    tasks = _csv_list(args.tasks) if args.tasks else list(spec["tasks"])
    contenders = _csv_list(args.contenders) if args.contenders else list(spec["contenders"])
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        raise BenchError(f"unknown contender(s) {unknown}; choose from {', '.join(CONTENDERS)}")
    seeds = [int(s) for s in _csv_list(args.seeds)] if args.seeds else list(spec["seeds"])
    steps = args.total_steps or spec.get("total_steps", DEFAULT_TOTAL_STEPS)
    return plan(args.mode, tasks, contenders, seeds, steps)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench_run = harness.Run("learning", argv)
    atari = args.mode == "atari"
    tools = Tools(
        ppomq_cmd=args.ppomq_cmd or (DEFAULT_ATARI_PPOMQ_CMD if atari else DEFAULT_PPOMQ_CMD),
        cleanrl_python=args.cleanrl_python,
        sf_python=args.sf_python,
        eval_episodes=0 if atari else EVAL_EPISODES,
    )
    try:
        jobs = jobs_from(args)
        paths = result_paths(args.out, args.mode)
        doc = load_doc(paths["json"], args.mode)
        todo = pending(jobs, doc["runs"], args.resume)
        check_tools(sorted({j.contender for j in todo}), tools, args.mode)
    except BenchError as exc:
        print(f"benchmarks.learning: {exc}", file=sys.stderr)
        return 2
    for contender, dist in PEER_DISTRIBUTIONS.items():
        if any(j.contender == contender for j in todo):
            bench_run.peer(dist, harness.venv_package_version(tools.python(contender), dist))
    doc["invocations"] = [
        *doc.get("invocations", []),
        harness.command_line("learning", argv),
    ]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} runs already recorded; {len(todo)} to run")
    try:
        run_all(todo, doc, args, tools, bench_run)
    except KeyboardInterrupt:  # the run in flight was killed; the finished ones are saved
        print(f"interrupted; finished runs are in {result_paths(args.out, args.mode)['json']}")
        return 130
    for p in save(doc, args.out, bench_run).values():
        print(p)
    ok = {record_key(r) for r in doc["runs"] if r.get("ok")}
    return 0 if all(j.key in ok for j in jobs) else 1


def run_all(
    todo: list[Job],
    doc: dict[str, Any],
    args: argparse.Namespace,
    tools: Tools,
    bench_run: harness.Run,
) -> None:
    """Each job in turn, the results saved after each one."""
    workdir = args.workdir.resolve()  # the commands run from the repo root
    for n, job in enumerate(todo, 1):
        print(f"[{n}/{len(todo)}] {job.name} ...", flush=True)
        rec = run_job(job, tools, workdir, args.lock or None, args.timeout_s)
        doc["runs"] = merge(doc["runs"], rec)
        # After every run: an interrupted benchmark loses no finished run.
        save(doc, args.out, bench_run)
        print(
            f"    {'ok' if rec['ok'] else 'FAILED: ' + str(rec['error'])[:300]}; "
            f"{_f(rec.get('command_s'), '{:.1f}')} s, SPS {_f(rec.get('sps'))}, "
            f"final {_f(rec.get('mean_return_20'))}, eval {_f(rec.get('eval_return'))}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
