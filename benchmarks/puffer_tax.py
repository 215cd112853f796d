"""The message-queue tax: ppomq against PufferLib 3.0.0, the fastest single-box PPO, on
PufferLib's own C CartPole (Ocean's puffer_cartpole) at PufferLib's batch shape.

    .venv/bin/python -m benchmarks.puffer_tax [--rounds 3] [--total-steps 2000000]
        [--contenders a,b,...] [--seed 1] [--puffer-python .venv-puffer/bin/python]
        [--profile-batches 5] [--out benchmarks/results] [--lock /tmp/ppomq-bench.lock]

Needs `bash benchmarks/contenders/puffer_setup.sh` (PufferLib's venv, and its cartpole
binding built for ppomq's venv). Contenders, one command each, interleaved round by round
(the order rotating), each run under the bench lock, one torch thread everywhere:

* pufferlib-matched: PufferLib's trainer (benchmarks/contenders/puffer_cartpole.py
  `--config matched`): one process, 1,024 C envs stepped by one C call, 65,536-sample
  updates (1,024 x 64), ppomq's MLP (64-64 tanh, separate policy and value networks), Adam,
  prioritized replay off.
* pufferlib-defaults: the same shape with PufferLib's own cartpole settings (LSTM policy,
  Muon, prioritized replay).
* ppomq-*: `ppomq train` on the same env through a Gymnasium shim
  (`--env-id benchmarks.contenders.puffer_cartpole_env:PufferCartPole-v0`), the same
  update (65,536 samples, one epoch, two 32,768-sample minibatches), network, Adam and
  PPO settings; by actors x envs per actor x steps, and `--batches-per-version` (1: the
  actor waits for each new version, as PufferLib's one loop does; 2: it collects the next
  batch while the learner trains on the last).
* ppomq-*-cvec: the same, with `--vectorization vector_entry_point`: the actor's 1,024 envs
  are the vector env the shim registers (PufferCartPoleVector), stepped by one C call a
  step as PufferLib steps them; what is left between it and PufferLib is ppomq's own path:
  processes, the wire, the learner.
* ppomq-*-2hosts: the same as -ahead-cvec, on two network hosts (benchmarks/deploy/split_run.py:
  Redis, the weightserver and the learner on one network namespace, the actor on another,
  CURVE over TCP between their addresses), as a run spread over machines is started by
  hand. Needs root. Both hosts share this machine's CPUs.

Per run: the command's time from its start to its exit for a fixed step count; SPS from
the first env step to the end of training and in steady state (first update to last); the
mean episode length (PufferLib's `score`; a return in the shim is the length minus one)
of the episodes that ended in the last 10% of the steps and around 1M; for ppomq, the
learner's and the actors' time split. Then `benchmarks.puffer_tax_profile` times each part
of ppomq's path alone on one batch of this shape. Medians over rounds, with min–max.
Writes puffer_tax.json and puffer_tax.md to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.contenders.common import RESULT_PREFIX

GOAL_RATIO = 1.5  # the goal: ppomq's SPS within 1.5x of PufferLib's
BASELINE = "pufferlib-matched"
SHIM_ENV_ID = "benchmarks.contenders.puffer_cartpole_env:PufferCartPole-v0"
PUFFER_VENV = harness.REPO / ".venv-puffer"
SETUP = "bash benchmarks/contenders/puffer_setup.sh"
FINAL_FRACTION = 0.1  # episodes ending in the last 10% of the steps
MID_STEPS = 1_000_000

# The PPO settings both run: PufferLib's cartpole config (config/ocean/cartpole.ini over
# default.ini) with Adam at a constant rate in place of Muon, chosen on PufferLib
# (3e-3 learned best of 3e-3, 1e-2 and 3e-2 at 2M steps).
HP: dict[str, Any] = {
    "learning_rate": 0.003,
    "gamma": 0.95,
    "gae_lambda": 0.90,
    "clip_coef": 0.2,
    "vf_coef": 2.0,
    "ent_coef": 0.001,
    "max_grad_norm": 1.5,
}


@dataclass(frozen=True)
class Shape:
    """PufferLib's batch shape: num_envs x horizon samples per update."""

    num_envs: int = 1024
    horizon: int = 64
    minibatch_size: int = 32768
    total_steps: int = 2_000_000

    @property
    def batch(self) -> int:
        return self.num_envs * self.horizon


QUICK = Shape(num_envs=256, horizon=16, minibatch_size=2048, total_steps=8192)


@dataclass(frozen=True)
class Contender:
    name: str
    label: str
    kind: str  # "puffer" | "ppomq"
    config: str = ""  # puffer: matched | defaults
    actors: int = 0
    env_share: int = 1  # ppomq: envs per actor = shape.num_envs // env_share
    batches_per_version: int = 1
    vectorization: str = "sync"  # ppomq: vector_entry_point steps the envs in one C call
    hosts: int = 1  # ppomq: 2 = learner and actors on two network hosts (split_run)

    def ppomq_layout(self, shape: Shape) -> tuple[int, int]:
        """(envs per actor, steps per batch) with the update still shape.batch samples."""
        envs = shape.num_envs // self.env_share
        return envs, shape.batch // (envs * self.actors)


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender("pufferlib-matched", "PufferLib, matched (MLP, Adam, no prio)", "puffer",
                  config="matched"),
        Contender("pufferlib-defaults", "PufferLib, its cartpole config (LSTM, Muon, prio)",
                  "puffer", config="defaults"),
        Contender("ppomq-1x1024", "ppomq, 1 actor x 1,024 envs, T=64", "ppomq", actors=1),
        Contender("ppomq-1x1024-ahead", "ppomq, 1 actor x 1,024 envs, T=64, 2 batches/version",
                  "ppomq", actors=1, batches_per_version=2),
        Contender("ppomq-2x512", "ppomq, 2 actors x 512 envs, T=64", "ppomq", actors=2,
                  env_share=2),
        Contender("ppomq-2x512-ahead", "ppomq, 2 actors x 512 envs, T=64, 2 batches/version",
                  "ppomq", actors=2, env_share=2, batches_per_version=2),
        Contender("ppomq-1x256-ahead", "ppomq, 1 actor x 256 envs, T=256, 2 batches/version",
                  "ppomq", actors=1, env_share=4, batches_per_version=2),
        Contender("ppomq-1x1024-cvec", "ppomq, 1 actor x 1,024 envs, T=64, envs in one C call",
                  "ppomq", actors=1, vectorization="vector_entry_point"),
        Contender("ppomq-1x1024-ahead-cvec",
                  "ppomq, 1 actor x 1,024 envs, T=64, 2 batches/version, envs in one C call",
                  "ppomq", actors=1, batches_per_version=2,
                  vectorization="vector_entry_point"),
        Contender("ppomq-1x1024-ahead-cvec-2hosts",
                  "ppomq on two network hosts (learner host, actor host), 1 actor x 1,024 "
                  "envs, T=64, 2 batches/version, envs in one C call",
                  "ppomq", actors=1, batches_per_version=2,
                  vectorization="vector_entry_point", hosts=2),
    )
}  # fmt: skip
DEFAULT_CONTENDERS = tuple(CONTENDERS)


def ppo_config(minibatch_size: int) -> Any:
    """ppomq's PPOConfig for HP (what `ppomq_command` passes as flags)."""
    from ppomq.learner.trainer import PPOConfig

    return PPOConfig(update_epochs=1, minibatch_size=minibatch_size, anneal_lr=False,
                     clip_vloss=True, **HP)  # fmt: skip


# --- one run ---------------------------------------------------------------------------


def ppomq_command(c: Contender, shape: Shape, seed: int, run_dir: Path) -> list[str]:
    """`ppomq train` on one box; with c.hosts == 2, benchmarks.deploy.split_run: the same
    learner and actors, the learner's services on one network host, the actors on another."""
    envs, steps = c.ppomq_layout(shape)
    flags = {f"--{k.replace('_', '-')}": str(v) for k, v in HP.items()}
    both = ["--env-id", SHIM_ENV_ID, "--num-envs", str(envs), "--num-steps", str(steps),
            "--seed", str(seed)]  # fmt: skip
    learner = [
        *both, "--batch-samples", str(shape.batch),
        "--batches-per-version", str(c.batches_per_version),
        "--update-epochs", "1", "--minibatch-size", str(shape.minibatch_size),
        *[x for kv in flags.items() for x in kv], "--no-anneal-lr", "--clip-vloss",
        "--hidden-sizes", "64,64", "--activation", "tanh", "--torch-threads", "1",
        "--total-steps", str(shape.total_steps), "--eval-episodes", "0",
    ]  # fmt: skip
    actor = [*both, "--vectorization", c.vectorization]
    if c.hosts == 2:
        return [sys.executable, "-m", "benchmarks.deploy.split_run", "--run-dir", str(run_dir),
                "--actors", str(c.actors), "--learner-args", shlex.join(learner),
                "--actor-args", shlex.join(actor)]  # fmt: skip
    return harness.ppomq_argv("train", *learner, "--vectorization", c.vectorization,
                              "--actors", str(c.actors), "--no-progress",
                              "--run-dir", str(run_dir))  # fmt: skip


def puffer_command(c: Contender, shape: Shape, seed: int, run_dir: Path, python: str) -> list[str]:
    return [
        python, "-m", "benchmarks.contenders.puffer_cartpole", "--config", c.config,
        "--seed", str(seed), "--total-steps", str(shape.total_steps),
        "--num-envs", str(shape.num_envs), "--horizon", str(shape.horizon),
        "--minibatch-size", str(shape.minibatch_size),
        "--learning-rate", str(HP["learning_rate"]), "--run-dir", str(run_dir),
    ]  # fmt: skip


def child_env() -> dict[str, str]:
    """One torch (OpenMP) thread; the shim importable from the repository root."""
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, OMP_NUM_THREADS="1",
                PYTHONPATH=str(harness.REPO) + (os.pathsep + path if path else ""))  # fmt: skip


def mean_length(episodes: list[tuple[int, float, int]], lo: float, hi: float) -> float | None:
    """Mean episode length over (env_steps, mean length, count) rows with lo <= steps < hi."""
    rows = [(m, n) for s, m, n in episodes if lo <= s < hi]
    total = sum(n for _, n in rows)
    return round(sum(m * n for m, n in rows) / total, 2) if total else None


def learning(rec: dict[str, Any], episodes: list[tuple[int, float, int]]) -> None:
    steps = rec["env_steps"]
    rec["final_length"] = mean_length(episodes, (1 - FINAL_FRACTION) * steps, float("inf"))
    rec["length_at_1m"] = (
        mean_length(episodes, 0.9 * MID_STEPS, 1.1 * MID_STEPS) if steps > MID_STEPS else None
    )


def collect_ppomq(run_dir: Path, t_cmd: float, rec: dict[str, Any]) -> None:
    from ppomq.core.timeline import first_env_step_unix

    summary = json.loads((run_dir / "summary.json").read_text())
    started = float(summary["started_unix"])
    train_end = started + float(summary["wall_seconds"])
    first = first_env_step_unix(run_dir)
    rec["env_steps"] = int(summary["total_env_steps"])
    rec["startup_s"] = round(first - t_cmd, 3) if first else None
    rec["sps"] = round(rec["env_steps"] / (train_end - first), 1) if first else None
    with open(run_dir / "progress.csv", newline="") as fh:
        rows = [(int(r["env_steps"]), float(r["wall_s"])) for r in csv.DictReader(fh)]
    rec["sps_steady"] = _rate(rows)
    with open(run_dir / "episodes.csv", newline="") as fh:
        eps = [(int(r["env_steps"]), float(r["length"]), 1) for r in csv.DictReader(fh)]
    learning(rec, eps)
    versions = max(1, int(summary["versions"]))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    stops = [e for e in events if e.get("event") == "actor.stop"]
    batches = max(1, sum(int(e.get("batches", 0)) for e in stops))
    actor_s: dict[str, float] = {}
    for e in stops:
        for k, v in e.get("seconds", {}).items():
            actor_s[k] = actor_s.get(k, 0.0) + float(v)
    rec["ppomq"] = {
        "versions": versions,
        "learner_wall_s": float(summary["wall_seconds"]),
        "learner_ms_per_update": {
            k: round(1000 * float(v) / versions, 2) for k, v in summary["learner_time_s"].items()
        },
        "actor_ms_per_batch": {k: round(1000 * v / batches, 2) for k, v in actor_s.items()},
        "batches": batches,
        "batches_rejected": summary.get("batches_rejected", {}),
        "batches_surplus": summary.get("batches_surplus", 0),
        "waste_ratio": summary.get("waste_ratio"),
    }


def _rate(rows: list[tuple[int, float]]) -> float | None:
    """Env steps per second between the first and the last (steps, seconds) row."""
    if len(rows) < 2 or rows[-1][1] <= rows[0][1]:
        return None
    return round((rows[-1][0] - rows[0][0]) / (rows[-1][1] - rows[0][1]), 1)


def collect_puffer(doc: dict[str, Any], t_cmd: float, rec: dict[str, Any]) -> None:
    rec["env_steps"] = int(doc["env_steps"])
    rec["startup_s"] = round(doc["first_step_unix"] - t_cmd, 3)
    rec["sps"] = round(rec["env_steps"] / (doc["train_end_unix"] - doc["first_step_unix"]), 1)
    curve = doc["curve"]
    rec["sps_steady"] = _rate([(int(p[0]), float(p[1])) for p in curve])
    learning(rec, [(int(s), float(m), int(n)) for s, _, m, n in curve])
    epochs = max(1, int(doc["epochs"]))
    rec["puffer"] = {
        "epochs": epochs,
        "policy": doc["policy"],
        "params": doc["params"],
        "ms_per_epoch": {k: round(1000 * v / epochs, 2) for k, v in doc["time_split_s"].items()},
        "optimizer": doc["train_config"].get("optimizer"),
    }


def run_one(
    c: Contender, shape: Shape, seed: int, workdir: Path, puffer_python: str, round_: int
) -> dict[str, Any]:
    run_dir = workdir / f"{c.name}-r{round_}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    if c.kind == "ppomq":
        cmd = ppomq_command(c, shape, seed, run_dir / "run")
    else:
        cmd = puffer_command(c, shape, seed, run_dir / "run", puffer_python)
    timeout = max(300.0, shape.total_steps / 2000)
    # PufferLib's import links `resources` into its working directory: the run's own.
    out = harness.run_command(cmd, run_dir, timeout, cwd=run_dir, env=child_env())
    rec: dict[str, Any] = {"contender": c.name, "round": round_, "seed": seed, **out}
    rec["ok"] = out["error"] is None
    if not rec["ok"]:
        return rec
    if c.kind == "ppomq":
        collect_ppomq(run_dir / "run", out["t_cmd"], rec)
    else:
        line = next(
            (ln for ln in (run_dir / "stdout.txt").read_text().splitlines()
             if ln.startswith(RESULT_PREFIX)), None,
        )  # fmt: skip
        if line is None:
            rec.update(ok=False, error="no result line")
            return rec
        collect_puffer(json.loads(line[len(RESULT_PREFIX) :]), out["t_cmd"], rec)
    return rec


def run_profile(shape: Shape, batches: int) -> dict[str, Any]:
    """benchmarks.puffer_tax_profile in its own process (one torch thread)."""
    cmd = [sys.executable, "-m", "benchmarks.puffer_tax_profile", "--batches", str(batches),
           "--num-envs", str(shape.num_envs), "--horizon", str(shape.horizon),
           "--minibatch-size", str(shape.minibatch_size)]  # fmt: skip
    done = subprocess.run(cmd, cwd=harness.REPO, env=child_env(), capture_output=True,
                          text=True, timeout=900, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"profile failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the report ------------------------------------------------------------------------


def _spread(values: list[float | None], digits: int = 1) -> dict[str, float] | None:
    vals = [v for v in values if v is not None]
    return harness.spread(vals, digits) if vals else None


def _median_map(maps: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for m in maps for k in m}
    return {k: round(statistics.median(m[k] for m in maps if k in m), 2) for k in sorted(keys)}


def summarise(runs: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """One row per contender: medians (min–max) over its successful runs."""
    rows = []
    base = [r for r in runs if r["contender"] == BASELINE and r.get("ok")]
    base_sps = harness.median([r["sps"] for r in base])
    base_steady = harness.median([r["sps_steady"] for r in base])
    base_cmd = harness.median([r["command_s"] for r in base])
    for name in order:
        ok = [r for r in runs if r["contender"] == name and r.get("ok")]
        failed = sum(1 for r in runs if r["contender"] == name and not r.get("ok"))
        row: dict[str, Any] = {"contender": name, "label": CONTENDERS[name].label,
                               "runs": len(ok), "failed": failed}  # fmt: skip
        if ok:
            for key in ("command_s", "sps", "sps_steady", "startup_s", "final_length",
                        "length_at_1m"):  # fmt: skip
                row[key] = _spread([r.get(key) for r in ok])
            sps = harness.median([r["sps"] for r in ok])
            steady = harness.median([r["sps_steady"] for r in ok])
            cmd = harness.median([r["command_s"] for r in ok])
            # How many times PufferLib's SPS is this contender's (the goal: <= 1.5).
            row["puffer_sps_over_this"] = round(base_sps / sps, 2) if base_sps and sps else None
            row["puffer_steady_over_this"] = (
                round(base_steady / steady, 2) if base_steady and steady else None
            )
            row["command_over_puffer"] = round(cmd / base_cmd, 2) if base_cmd and cmd else None
            if "ppomq" in ok[0]:
                row["learner_ms_per_update"] = _median_map(
                    [r["ppomq"]["learner_ms_per_update"] for r in ok]
                )
                row["actor_ms_per_batch"] = _median_map(
                    [r["ppomq"]["actor_ms_per_batch"] for r in ok]
                )
                row["rejected"] = sum(sum(r["ppomq"]["batches_rejected"].values()) for r in ok)
            if "puffer" in ok[0]:
                row["puffer_ms_per_epoch"] = _median_map([r["puffer"]["ms_per_epoch"] for r in ok])
                row["policy"] = ok[0]["puffer"]["policy"]
        rows.append(row)
    return rows


def _cell(s: dict[str, float] | None, fmt: str = "{:,.0f}") -> str:
    if not s:
        return "–"
    if s["min"] == s["max"]:
        return fmt.format(s["median"])
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}–{fmt.format(s['max'])})"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def best_ppomq(rows: list[dict[str, Any]], vectorization: str) -> dict[str, Any] | None:
    """The fastest ppomq row (median SPS) among those whose actors step their envs so."""
    ppomq = [
        r for r in rows
        if r["contender"].startswith("ppomq") and r.get("sps")
        and CONTENDERS[r["contender"]].vectorization == vectorization
        and CONTENDERS[r["contender"]].hosts == 1
    ]  # fmt: skip
    return max(ppomq, key=lambda r: r["sps"]["median"]) if ppomq else None


def markdown(doc: dict[str, Any]) -> str:
    shape, rows = doc["shape"], doc["rows"]
    lines = [
        "# The message-queue tax: ppomq against PufferLib on its C CartPole",
        "",
        f"`{doc['command']}` — {doc['date']}, {harness.machine_line(doc['machine'])}, "
        f"PufferLib {doc.get('pufferlib', '3.0.0')}; load average before / after: "
        f"{doc['load_before']} / {doc['load_after']}. {doc['rounds']} interleaved rounds, "
        f"{shape['total_steps']:,} env steps a run, seed {doc['seed']}, one torch thread "
        "everywhere.",
        "",
        f"Batch shape: {shape['num_envs']:,} envs x {shape['horizon']} steps = "
        f"{shape['num_envs'] * shape['horizon']:,} samples an update, one epoch of "
        f"{shape['minibatch_size']:,}-sample minibatches. SPS: env steps from the first env "
        "step to the end of training; steady: from the first update to the last. Episode "
        "length: PufferLib's `score` (200 at most), over the episodes that ended in the last "
        "10% of the steps, and around 1M steps.",
        "",
        "| contender | command to exit, s | SPS | steady SPS | PufferLib's SPS ÷ this "
        "| final length | length at 1M |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {_cell(r.get('command_s'), '{:.1f}')} | {_cell(r.get('sps'))} "
            f"| {_cell(r.get('sps_steady'))} | {_x(r.get('puffer_sps_over_this'))} "
            f"| {_cell(r.get('final_length'), '{:.1f}')} "
            f"| {_cell(r.get('length_at_1m'), '{:.1f}')} |"
        )
    paths = (
        ("sync", "one Gymnasium env each (`--vectorization sync`, the default)"),
        ("vector_entry_point", "the envs in one C call (`--vectorization vector_entry_point`)"),
    )
    for vectorization, path in paths:
        best = best_ppomq(rows, vectorization)
        if best is None or best.get("puffer_sps_over_this") is None:
            continue
        ratio = best["puffer_sps_over_this"]
        met = "met" if ratio <= GOAL_RATIO else "not met"
        lines += ["", f"**Goal** (ppomq within {GOAL_RATIO}× of PufferLib's SPS at its batch "
                  f"shape), {path}: {met}: the fastest layout, {best['label']}, makes "
                  f"PufferLib's SPS {ratio:.2f}× its own."]  # fmt: skip
    for r in rows:
        if CONTENDERS[r["contender"]].hosts == 2 and r.get("puffer_sps_over_this"):
            ratio = r["puffer_sps_over_this"]
            met = "met" if ratio < 1 else "not met"
            lines += ["", f"**Goal** (ppomq on two network hosts faster than PufferLib on "
                      f"one): {met}: PufferLib's SPS is {ratio:.2f}× that of {r['label']}. "
                      "The two hosts are network namespaces of this one machine: they share "
                      "its CPUs, so what this row adds is the network between learner and "
                      "actors, not a second machine's cores."]  # fmt: skip
    lines += [
        "",
        "## ppomq in the system: time per update and per batch (ms, medians)",
        "",
        "| contender | learner wait | targets | SGD | publish | actor sample "
        "| actor waits for weights | actor send |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lu, ab = r.get("learner_ms_per_update"), r.get("actor_ms_per_batch")
        if not lu or ab is None:
            continue
        lines.append(
            f"| {r['label']} | {lu.get('wait', 0):,.0f} | {lu.get('targets', 0):,.0f} "
            f"| {lu.get('sgd', 0):,.0f} | {lu.get('publish', 0):,.0f} "
            f"| {ab.get('sample', 0):,.0f} | {ab.get('weights', 0):,.0f} "
            f"| {ab.get('send', 0):,.0f} |"
        )
    for r in rows:
        if r.get("puffer_ms_per_epoch"):
            pe = r["puffer_ms_per_epoch"]
            lines.append(f"\n{r['label']} ({r.get('policy')}), per update: evaluate "
                         f"(env, forward, copies) {pe.get('evaluate', 0):,.0f} ms, train "
                         f"{pe.get('train', 0):,.0f} ms.")  # fmt: skip
    prof = doc.get("profile")
    if prof:
        a, w, lr = prof["actor_ms"], prof["wire_ms"], prof["learner_ms"]
        lines += [
            "",
            f"## ppomq's path, part by part, on one {prof['num_envs']:,} x {prof['horizon']} "
            f"batch ({prof['batch_bytes'] / 1e6:.2f} MB on the wire; ms, median of "
            f"{prof['batches']})",
            "",
            "| part | ms | what |",
            "|---|---|---|",
            f"| actor: env step | {a['env_step']:,.1f} | Gymnasium's SyncVectorEnv over the "
            "shim's envs, one Python call per env per step |",
            f"| actor: policy act | {a['policy_act']:,.1f} | the MLP's forward and sampling, "
            "[N, 4] a step |",
            f"| actor: runner's own | {a['runner_own']:,.1f} | buffers, episode ends, "
            "truncation values |",
            f"| actor: encode | {a['encode']:,.2f} | msgpack header, arrays as frames |",
            f"| wire, plain | {w['plain']:,.2f} | RolloutSender → RolloutReceiver, tcp loopback |",
            f"| wire, CURVE | {w['curve']:,.2f} | the same, encrypted (`ppomq train`'s default) |",
            f"| learner: decode | {lr['decode']:,.2f} | validation included |",
            f"| learner: episode check | {lr['episode_check']:,.2f} | the claimed episodes "
            "rebuilt from rewards and done flags |",
            f"| learner: targets | {lr['targets']:,.1f} | GAE |",
            f"| learner: SGD | {lr['sgd']:,.1f} | one epoch, "
            f"{prof['minibatch_size']:,}-sample minibatches |",
            f"| PufferLib's C vector step, same envs | {prof['c_vector_step_ms']:,.1f} | "
            "one `vec_step` call for all envs a step, for reference |",
        ]
        v = prof.get("actor_vector_ms")
        if v:
            lines += [
                f"| actor sample with the envs behind one C call | {v['sample']:,.1f} | env "
                f"step {v['env_step']:,.1f}, policy act {v['policy_act']:,.1f}, runner's own "
                f"{v['runner_own']:,.1f}: EnvRunner on the shim's PufferCartPoleVector, what "
                "`--vectorization vector_entry_point` steps |",
            ]
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------


def puffer_ready(python: str) -> str | None:
    """Why the comparison cannot run, or None."""
    from benchmarks.contenders.puffer_cartpole_env import binding_path

    if not Path(python).exists():
        return f"no PufferLib venv at {python}: run {SETUP}"
    if not binding_path().is_file():
        return f"no cartpole binding at {binding_path()}: run {SETUP}"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--total-steps", type=int, default=Shape.total_steps)
    p.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--puffer-python", default=str(PUFFER_VENV / "bin" / "python"))
    p.add_argument("--profile-batches", type=int, default=5, help="0: no profile")
    p.add_argument("--quick", action="store_true", help="a tiny shape (smoke test)")
    p.add_argument("--out", default=str(harness.RESULTS))
    harness.add_lock_option(p, harness.LOCK_PATH)
    a = p.parse_args(argv)
    bench_run = harness.Run("puffer_tax", argv)
    names = [n for n in a.contenders.split(",") if n]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        p.error(f"unknown contenders {unknown}; known: {', '.join(CONTENDERS)}")
    why = puffer_ready(a.puffer_python)
    if why:
        print(f"puffer_tax: {why}", file=sys.stderr)
        return 2
    bench_run.peer("pufferlib", harness.venv_package_version(a.puffer_python, "pufferlib"))
    shape = QUICK if a.quick else Shape(total_steps=a.total_steps)
    load_before = harness.loadavg()
    with tempfile.TemporaryDirectory(prefix="ppomq-puffer-tax-", dir="/tmp") as tmp:

        def one(name: str, r: int) -> dict[str, Any]:
            rec = run_one(CONTENDERS[name], shape, a.seed, Path(tmp), a.puffer_python, r)
            print(f"round {r} {name}: cmd {rec['command_s']} s, sps {rec.get('sps')}, "
                  f"steady {rec.get('sps_steady')}, final length {rec.get('final_length')}"
                  f"{'' if rec['ok'] else ', ' + str(rec['error'])}", flush=True)  # fmt: skip
            return rec

        by = harness.interleave(names, a.rounds, one, lock=a.lock)
    runs = [rec for name in names for rec in by[name]]
    profile = None
    if a.profile_batches > 0:
        with harness.BenchLock(a.lock):
            profile = run_profile(shape, a.profile_batches)
    doc = {
        "command": harness.command_line("puffer_tax", argv),
        "date": harness.utc_now(),
        "machine": harness.machine(torch_threads=1),
        "pufferlib": bench_run.peers["pufferlib"],
        "load_before": load_before,
        "load_after": harness.loadavg(),
        "rounds": a.rounds,
        "seed": a.seed,
        "shape": {
            "num_envs": shape.num_envs,
            "horizon": shape.horizon,
            "minibatch_size": shape.minibatch_size,
            "total_steps": shape.total_steps,
        },
        "hyperparameters": HP,
        "goal_ratio": GOAL_RATIO,
        "rows": summarise(runs, names),
        "profile": profile,
        "runs": runs,
    }
    print(harness.write_results(Path(a.out), "puffer_tax", doc, markdown(doc), bench_run))
    return 0 if all(r.get("ok") for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
