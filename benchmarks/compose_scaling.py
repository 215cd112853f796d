"""`docker compose up --scale actor=N` on a real engine: what N actor replicas buy, with no
other change.

    .venv/bin/python -m benchmarks.compose_scaling [--actors 1 2 4 8] [--rounds 2]
        [--total-steps 30000] [--image TAG] [--out benchmarks/results/compose_scaling]
        [--append] [--markdown-only]

Each round, for every N in an order that rotates round by round: `PPOMQ_TOTAL_STEPS=T
docker compose up --build --scale actor=N` of the repository's docker-compose.yml on a real
engine (benchmarks/deploy/docker_engine.py: the shared engine tool where no engine answers),
every other setting at the file's defaults (CartPole-v1, 8 envs x 32 steps, async, the
update-size rule the learner defaults to), then `docker compose down -v`. Each `up` is a
compose project of its own (fresh volumes); the image is built once before the first round,
so each `--build` is a cache hit. `--image TAG` builds and runs the image under another tag
(IMAGE=TAG), so that a run of another checkout does not replace `ppomq:latest`.

From the finished run's summary.json and progress.csv (copied out of the exited learner
container's `runs` volume): env steps/s over the whole run (accepted env steps / the
learner's wall time) and steady (from the middle update to the last, where start-up is
over), trained samples/s, batches produced / accepted / surplus, waste_ratio (batches
received but not trained on, over batches received), the actors that trained, and the
seconds from the command's start to its exit (build check, start, training, evaluation,
every service stopped). Writes OUT.json and OUT.md; `--append` adds this invocation's rounds
to OUT.json's (medians over all), `--markdown-only` rewrites OUT.md from OUT.json. Each `up`
runs under the lock (`--lock`, default /tmp/ppomq-bench.lock).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.deploy.docker_engine import ComposeProject, Engine, start_engine

RUN_ID = "cartpole"  # the compose file's default PPOMQ_RUN_ID
UP_TIMEOUT_S = 1200.0


def steady_sps(progress: Path) -> float | None:
    """Accepted env steps per second from the middle update to the last (None: too few)."""
    with progress.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("wall_s") and r.get("env_steps")]
    if len(rows) < 4:
        return None
    first, last = rows[len(rows) // 2], rows[-1]
    dt = float(last["wall_s"]) - float(first["wall_s"])
    if dt <= 0:
        return None
    return round((float(last["env_steps"]) - float(first["env_steps"])) / dt, 1)


def brief(summary: dict[str, Any], steady: float | None) -> dict[str, Any]:
    keys = ("actors", "actors_hint", "mode", "total_env_steps", "discarded_env_steps",
            "trained_samples", "wall_seconds", "sps", "versions", "batches_produced",
            "batches_accepted", "batches_surplus", "batches_rejected", "waste_ratio",
            "learner_time_s", "final_eval_return")  # fmt: skip
    out = {k: summary.get(k) for k in keys}
    wall = summary.get("wall_seconds") or 0
    trained = summary.get("trained_samples")
    out["trained_samples_per_s"] = round(trained / wall, 1) if trained and wall else None
    out["steady_sps"] = steady
    return out


def sampled_sps(s: dict[str, Any]) -> float | None:
    """Env steps of every batch the learner received, trained or not, per second."""
    if not s.get("wall_seconds"):
        return None
    return round((s["total_env_steps"] + s["discarded_env_steps"]) / s["wall_seconds"], 1)


def compose_run(
    engine: Engine, env_file: Path, tmp: Path, actors: int, total_steps: int, image: str | None
) -> dict[str, Any]:
    """One `up --build --scale actor=N` to the run's end, its summary read, then `down -v`."""
    project = ComposeProject(engine, f"ppomq-scale-{uuid.uuid4().hex[:6]}", env_file)
    project.settings = {"PPOMQ_TOTAL_STEPS": str(total_steps)}
    if image:
        project.settings["IMAGE"] = image
    load_before = harness.loadavg()
    t0 = time.monotonic()
    up = project.popen("up", "--build", "--scale", f"actor={actors}")
    tail: list[str] = []
    try:
        for line in up.stdout or []:
            tail = [*tail[-39:], line.rstrip()]
        rc = up.wait(timeout=UP_TIMEOUT_S)
        exit_s = round(time.monotonic() - t0, 2)
        out: dict[str, Any] = {"actors_scaled": actors, "rc": rc, "exit_s": exit_s,
                               "load_before": load_before,
                               "load_after": harness.loadavg()}  # fmt: skip
        cid = project.container_id("learner")
        run_dir = f"{cid}:/data/runs/{RUN_ID}"
        dest = tmp / project.name
        dest.mkdir()
        engine.docker("cp", f"{run_dir}/summary.json", str(dest / "summary.json"))
        engine.docker("cp", f"{run_dir}/progress.csv", str(dest / "progress.csv"), check=False)
        summary = json.loads((dest / "summary.json").read_text())
        progress = dest / "progress.csv"
        out["summary"] = brief(summary, steady_sps(progress) if progress.exists() else None)
        if rc != 0:
            out["log_tail"] = tail
        return out
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        project.run("--profile", "*", "down", "-v", "--timeout", "5", timeout=300, check=False)


def merge(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """Two invocations' runs as one document (`--append`): each N's runs in the order they
    ran, the rounds added up. The earlier records stay ("run", "earlier_runs"): writing the
    result stamps the later one and keeps them (benchmarks/record.py)."""
    runs = {n: [*earlier["runs"].get(n, []), *later["runs"].get(n, [])]
            for n in {**earlier["runs"], **later["runs"]}}  # fmt: skip
    meta = {**later["meta"], "rounds": earlier["meta"]["rounds"] + later["meta"]["rounds"],
            "loadavg_before": earlier["meta"]["loadavg_before"]}  # fmt: skip
    meta["orders"] = [*earlier["meta"].get("orders", [list(earlier["runs"])]),
                      *later["meta"].get("orders", [list(later["runs"])])]  # fmt: skip
    kept = {k: earlier[k] for k in ("run", "earlier_runs") if k in earlier}
    return {**kept, "runs": runs, "meta": meta}


def _med(runs: list[dict[str, Any]], key: str, digits: int = 1) -> float | None:
    return harness.median([r["summary"].get(key) for r in runs if "summary" in r], digits)


def table(doc: dict[str, Any]) -> list[str]:
    lines = [
        "| `--scale actor=N` | actors trained | env steps/s sampled | env steps/s trained "
        "(whole) | (steady) | trained samples/s | waste | batches produced / accepted / "
        "surplus | command to exit (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for n, runs in doc["runs"].items():
        counts = "; ".join(
            f"{r['summary']['batches_produced']} / {r['summary']['batches_accepted']} / "
            f"{r['summary']['batches_surplus']}"
            for r in runs
            if "summary" in r
        )
        waste = _med(runs, "waste_ratio", 4)
        steady = _med(runs, "steady_sps", 0)
        sampled = harness.median([sampled_sps(r["summary"]) for r in runs if "summary" in r], 0)
        lines.append(
            f"| {n} | {_med(runs, 'actors', 0):.0f} "
            f"| {sampled:,.0f} "
            f"| {_med(runs, 'sps', 0):,.0f} | {'-' if steady is None else f'{steady:,.0f}'} "
            f"| {_med(runs, 'trained_samples_per_s', 0):,.0f} "
            f"| {waste * 100:.1f} % | {counts} "
            f"| {harness.median([r['exit_s'] for r in runs], 1)} |"
        )
    return lines


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    rounds = m["rounds"]
    orders = "; ".join(", ".join(o) for o in m.get("orders", []))
    how = (
        f"median of {rounds} rounds (N in the order {orders}), every run's batch counts listed"
        if rounds > 1
        else "one round (one run per N)"
    )
    lines = [
        f"# `docker compose up --scale actor=N`, CartPole-v1, {m['total_steps']:,} env steps",
        "",
        f"`{m['command']}` on {harness.machine_line(m['machine'])}, {m['engine']}, image "
        f"`{m['image']}` from commit {m['commit']}; {how}. Each run: `PPOMQ_TOTAL_STEPS="
        f"{m['total_steps']} docker compose up --build --scale actor=N`, then `down -v`; every "
        "other setting at the compose file's defaults. Env steps/s sampled: every batch the "
        "learner received (trained or not) over its wall time; trained: accepted env steps over "
        "its wall time (steady: middle update to last). Waste: batches received but not "
        "trained on, over batches received. Command to exit: from `up`'s start to its exit "
        "(`--build`, a rebuild where the tree changed since the last, start-up, training, the "
        "final evaluation, every service stopped). Load average (1/5/15 min) "
        f"{m['loadavg_before']} before, {m['loadavg_after']} after (other work shared the "
        "machine).",
        "",
        *table(doc),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--total-steps", type=int, default=30_000)
    ap.add_argument("--image", default=None, help="IMAGE to build and run (default: ppomq:latest)")
    ap.add_argument("--out", type=Path, default=harness.RESULTS / "compose_scaling")
    ap.add_argument("--append", action="store_true",
                    help="add this invocation's rounds to OUT.json's")  # fmt: skip
    ap.add_argument("--markdown-only", action="store_true",
                    help="rewrite OUT.md from OUT.json (no runs)")  # fmt: skip
    harness.add_lock_option(ap, default=harness.LOCK_PATH)
    args = ap.parse_args(argv)
    if args.markdown_only:
        doc = json.loads(args.out.with_suffix(".json").read_text())
        print(harness.write_markdown(args.out.with_suffix(".md"), markdown(doc)))
        return 0
    bench_run = harness.Run("compose_scaling", argv)
    load_before = harness.loadavg()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        engine = start_engine(tmp)
        env_file = tmp / "empty.env"
        env_file.write_text("")
        build = ComposeProject(engine, "ppomq-scale-build", env_file)
        if args.image:
            build.settings = {"IMAGE": args.image}
        build.run("build", timeout=1800)

        def run(n: int, _round: int) -> dict[str, Any]:
            return compose_run(engine, env_file, tmp, n, args.total_steps, args.image)

        def show(n: int, r: int, result: dict[str, Any]) -> None:
            print(f"actor={n} round {r}", json.dumps(result), flush=True)

        runs = harness.interleave(args.actors, args.rounds, run, lock=args.lock, on_result=show)
        version = engine.docker("version", "--format", "{{.Server.Version}}").strip()
    doc: dict[str, Any] = {
        "runs": {str(n): v for n, v in runs.items()},
        "meta": {
            "command": harness.command_line("compose_scaling", argv),
            "machine": harness.machine(),
            "commit": bench_run.commit,
            "engine": f"Docker engine {version}",
            "image": args.image or "ppomq:latest",
            "rounds": args.rounds,
            "total_steps": args.total_steps,
            "loadavg_before": load_before,
            "loadavg_after": harness.loadavg(),
        },
    }
    doc["meta"]["orders"] = [[str(n) for n in harness.round_order(args.actors, r)]
                             for r in range(args.rounds)]  # fmt: skip
    if args.append and args.out.with_suffix(".json").exists():
        doc = merge(json.loads(args.out.with_suffix(".json").read_text()), doc)
    print(harness.write_results(args.out.parent, args.out.name, doc, markdown(doc), bench_run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
