"""`docker compose up` as a user feels it, against `ppomq train` on the same machine.

    .venv/bin/python -m benchmarks.compose_up [--pairs 3]

Each pair, in alternating order: `docker compose up --build` of the repository's file on a
real engine (benchmarks/deploy/docker_engine.py: the shared engine tool where no engine
answers; the image already built, so `--build` is a cache hit) with
PPOMQ_TARGET_RETURN=475 and every other setting at the file's defaults (CartPole-v1, 2
actors, 8 envs × 32 steps, async), and `ppomq train --actors 2 --target-return 475` (the
same settings: both run the same learner and actors). Timed from the command's start:
the first trained version served (compose: the weightserver's first "now serving version
1" line; local: the learner's first update in progress.csv, which the local weightserver
serves at once), and the command's exit (the run solved, evaluated, every service
stopped). Also: the image's size. Writes benchmarks/results/compose_up.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.deploy.docker_engine import ComposeProject, Engine, start_engine

TARGET = "475"


def compose_run(project: ComposeProject, tmp: Path) -> dict[str, Any]:
    project.settings = {"PPOMQ_TARGET_RETURN": TARGET}
    t0 = time.monotonic()
    first = None
    up = project.popen("up", "--build")
    for line in up.stdout or []:
        if first is None and "now serving version 1 " in line:
            first = time.monotonic() - t0
    rc = up.wait()
    total = time.monotonic() - t0
    dest = tmp / f"{project.name}.json"
    cid = project.container_id("learner")
    project.engine.docker("cp", f"{cid}:/data/runs/cartpole/summary.json", str(dest))
    summary = json.loads(dest.read_text())
    project.run("--profile", "*", "down", "-v", "--timeout", "5", timeout=180)
    return {"rc": rc, "first_version_s": first, "exit_s": total, "summary": _brief(summary)}


def local_run(tmp: Path) -> dict[str, Any]:
    run_dir = tmp / f"local-{uuid.uuid4().hex[:6]}"
    cmd = [str(Path(sys.executable).parent / "ppomq"), "train", "--actors", "2",
           "--target-return", TARGET, "--run-dir", str(run_dir)]  # fmt: skip
    t0 = time.time()
    rc = subprocess.run(cmd, capture_output=True, timeout=900).returncode
    total = time.time() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
    # progress.csv's first row is the first update; its wall_s is on the learner's clock,
    # which starts at started_unix.
    rows = (run_dir / "progress.csv").read_text().splitlines()
    header = rows[0].split(",")
    first_row = dict(zip(header, rows[1].split(","), strict=True)) if len(rows) > 1 else None
    first = None
    if first_row is not None:
        first = summary["started_unix"] + float(first_row["wall_s"]) - t0
    return {"rc": rc, "first_version_s": first, "exit_s": total, "summary": _brief(summary)}


def _brief(s: dict[str, Any]) -> dict[str, Any]:
    keys = ("total_env_steps", "solved_at_env_steps", "solved_at_wall_s", "wall_seconds",
            "final_eval_return", "actors", "versions")  # fmt: skip
    return {k: s.get(k) for k in keys}


def _med(values: list[float | None]) -> float | None:
    return harness.median(values, digits=1)


def _pair(run: dict[str, Any]) -> str:
    first = run["first_version_s"]
    return f"{first:.1f} / {run['exit_s']:.1f}" if first is not None else f"- / {run['exit_s']:.1f}"


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        "# `docker compose up` against `ppomq train`, CartPole-v1 to a mean return of 475",
        "",
        f"`{m['command']}` on {harness.machine_line(m['machine'])}, {m['engine']}; {m['pairs']} "
        "pairs, interleaved (the order alternates). Seconds from the command's start; medians "
        "with every run listed. Image `ppomq:latest` (CPU torch): "
        f"{m['image_bytes'] / 1e9:.2f} GB. Load average (1/5/15 min) {m['loadavg_before']} "
        f"before, {m['loadavg_after']} after (other work shared the machine).",
        "",
        "| | first version (s) | solved, evaluated, exited (s) | env steps to solve "
        "| runs: first / exit (s) |",
        "|---|---:|---:|---:|---|",
    ]
    for name in ("compose", "local"):
        runs = doc[name]
        lines.append(
            f"| {'`docker compose up --build`' if name == 'compose' else '`ppomq train`'} "
            f"| {_med([r['first_version_s'] for r in runs])} "
            f"| {_med([r['exit_s'] for r in runs])} "
            f"| {_med([r['summary']['solved_at_env_steps'] for r in runs])} "
            f"| {'; '.join(_pair(r) for r in runs)} |"
        )
    c, loc = doc["compose"], doc["local"]
    ratio = _med([r["exit_s"] for r in c]) / _med([r["exit_s"] for r in loc])  # type: ignore[operator]
    lines += ["", f"compose / local, whole command: {ratio:.2f}×.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=harness.RESULTS / "compose_up")
    harness.add_lock_option(ap)
    args = ap.parse_args(argv)
    bench_run = harness.Run("compose_up", argv)
    load_before = harness.loadavg()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        engine = start_engine(tmp)
        env_file = tmp / "empty.env"
        env_file.write_text("")
        ComposeProject(engine, "ppomq-bench-build", env_file).run("build", timeout=1800)

        def run(name: str, _pair: int) -> dict[str, Any]:
            return compose_once(engine, env_file, tmp) if name == "compose" else local_run(tmp)

        def show(name: str, _pair: int, result: dict[str, Any]) -> None:
            print(name, json.dumps(result), flush=True)

        doc: dict[str, Any] = harness.interleave(
            ("compose", "local"), args.pairs, run, order="reverse", lock=args.lock, on_result=show
        )
        size = int(engine.docker("image", "inspect", "-f", "{{.Size}}", "ppomq:latest").strip())
        version = engine.docker("version", "--format", "{{.Server.Version}}").strip()
    doc["meta"] = {
        "command": harness.command_line("compose_up", argv),
        "machine": harness.machine(),
        "date": harness.utc_now(),
        "engine": f"Docker engine {version}",
        "pairs": args.pairs,
        "image_bytes": size,
        "loadavg_before": load_before,
        "loadavg_after": harness.loadavg(),
    }
    print(harness.write_results(args.out.parent, args.out.name, doc, markdown(doc), bench_run))
    return 0


def compose_once(engine: Engine, env_file: Path, tmp: Path) -> dict[str, Any]:
    project = ComposeProject(engine, f"ppomq-bench-{uuid.uuid4().hex[:6]}", env_file)
    return compose_run(project, tmp)


if __name__ == "__main__":
    raise SystemExit(main())
