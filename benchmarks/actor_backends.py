"""Actor SPS by env backend: gymnasium, ale (ale-py's C++ AtariVectorEnv) and envpool.

Two measurements per env id, backend and env count N, each in a fresh process:

- `policy`: what one actor does, without sockets: `make_vector_env(..., backend=B)`, the
  real `EnvRunner`, a freshly initialized model as the actor builds it (the Nature CNN for
  Atari, an MLP 64,64 tanh otherwise), `sample()` back to back with one torch thread.
  SPS = env steps (T x N per rollout) per wall second.
- `raw`: the vector env alone, stepped with uniformly random actions drawn beforehand (no
  policy, no runner): the env's own share of the actor's time.

Each is a warm-up, then a window; rounds interleave the configurations (every other round
reversed), and the tables give the median (and min-max) over rounds. A backend that cannot
run here is left out with a note: envpool when it is not installed (the envpool
extra), ale for ids that are not Atari's.

    flock -o /tmp/ppomq-bench.lock .venv/bin/python -m benchmarks.actor_backends
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import statistics
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks import harness
from ppomq.core.errors import install_hint

ENV_IDS = ("BreakoutNoFrameskip-v4",)
NUM_ENVS = (1, 8, 16)
BACKENDS = ("gymnasium", "ale", "envpool")
MODES = ("policy", "raw")
MODE_TITLES = {
    "policy": "the actor's rollout: EnvRunner.sample() with the policy",
    "raw": "the env alone: random actions, no policy",
}


def skipped_backends(backends: Sequence[str], env_ids: Sequence[str]) -> dict[str, str]:
    """Backend (or "backend env_id") -> why it is left out of this run."""
    out: dict[str, str] = {}
    if "envpool" in backends and importlib.util.find_spec("envpool") is None:
        out["envpool"] = f"envpool is not installed here ({install_hint('envpool')})"
    if "ale" in backends:
        from ppomq.core.envs import check_env_id
        from ppomq.core.envs.atari import is_atari

        for env_id in env_ids:
            check_env_id(env_id)  # registers ale-py's ids in this process
            if not is_atari(env_id):
                out[f"ale {env_id}"] = f"--env-backend ale covers Atari ids, not {env_id}"
    return out


def configs(
    env_ids: Sequence[str], counts: Sequence[int], backends: Sequence[str], modes: Sequence[str]
) -> list[tuple[str, str, int, str]]:
    """(mode, env_id, N, backend) for every case that can run here."""
    skip = skipped_backends(backends, env_ids)
    return [
        (mode, env_id, n, b)
        for mode in modes
        for env_id in env_ids
        for n in counts
        for b in backends
        if b not in skip and f"{b} {env_id}" not in skip
    ]


def _sample_loop(cfg: dict[str, Any], envs: Any) -> tuple[int, float, float]:
    """(env steps, wall s, CPU s) of EnvRunner.sample() over the window."""
    import torch

    from ppomq.actor.runner import EnvRunner
    from ppomq.core.envs import rollout_spec_for
    from ppomq.core.models import build_model, model_spec_for

    torch.set_num_threads(1)  # as run_actor does
    n, t, env_id = cfg["num_envs"], cfg["num_steps"], cfg["env_id"]
    spec = rollout_spec_for(env_id, run_id="bench", num_steps=t, max_bytes=1 << 30)
    runner = EnvRunner(envs=envs, spec=spec, run_id="bench", actor_id="a0", env_id=env_id)
    policy = build_model(model_spec_for(spec, hidden=[64, 64])).inference()
    end = time.perf_counter() + cfg["warmup_s"]
    seq = 0
    while time.perf_counter() < end:
        runner.sample(policy, policy_version=0, seq=seq)
        seq += 1
    t0, c0, steps = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - t0 < cfg["window_s"]:
        runner.sample(policy, policy_version=0, seq=seq)
        seq += 1
        steps += n * t
    return steps, time.perf_counter() - t0, time.process_time() - c0


def _raw_loop(cfg: dict[str, Any], envs: Any) -> tuple[int, float, float]:
    """(env steps, wall s, CPU s) of envs.step(random actions) over the window."""
    import numpy as np

    n = cfg["num_envs"]
    space = envs.single_action_space
    rng = np.random.default_rng(0)
    # Drawn beforehand so that neither backend pays for sampling inside the window.
    actions = rng.integers(0, space.n, size=(4096, n)).astype(space.dtype)
    envs.reset()
    i = 0
    end = time.perf_counter() + cfg["warmup_s"]
    while time.perf_counter() < end:
        envs.step(actions[i % len(actions)])
        i += 1
    t0, c0, steps = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() - t0 < cfg["window_s"]:
        envs.step(actions[i % len(actions)])
        i += 1
        steps += n
    return steps, time.perf_counter() - t0, time.process_time() - c0


def worker(conn: Connection, cfg: dict[str, Any]) -> None:
    from ppomq.core.envs import env_seed, make_vector_env

    n, env_id = cfg["num_envs"], cfg["env_id"]
    seeds = [env_seed(1, 0, i) for i in range(n)]
    envs = make_vector_env(env_id, n, seeds, backend=cfg["backend"])
    loop = _sample_loop if cfg["mode"] == "policy" else _raw_loop
    steps, wall, cpu = loop(cfg, envs)
    # Steps per CPU second is what a step costs, whatever share of the shared cores the
    # process got; SPS is what it got done with that share.
    conn.send({"sps": steps / wall, "cpu_cores": cpu / wall, "steps_per_cpu_s": steps / cpu})
    envs.close()


def measure(cfg: dict[str, Any]) -> dict[str, Any]:
    """One configuration in a fresh spawned process (nothing imported or warmed before)."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker, args=(child, cfg))
    proc.start()
    child.close()
    try:
        out = parent.recv()
    except EOFError:
        proc.join(60)
        raise RuntimeError(f"the measuring process died (exit {proc.exitcode}): {cfg}") from None
    proc.join(60)
    return out


def summarise(
    runs: dict[tuple[str, str, int, str], list[dict[str, Any]]], backends: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per (mode, env id, N): each backend's median (min-max) SPS, CPU and steps per
    CPU second, and each backend against gymnasium: the ratio of the medians, and the median
    (min-max) of the rounds' own ratios (each round ran the two back to back)."""
    rows: list[dict[str, Any]] = []
    for mode, env_id, n in dict.fromkeys((m, e, k) for m, e, k, _ in runs):
        row: dict[str, Any] = {"mode": mode, "env_id": env_id, "num_envs": n}
        for b in backends:
            got = runs.get((mode, env_id, n, b))
            if not got:
                continue
            sps = [x["sps"] for x in got]
            s = harness.spread(sps, 1)
            cpu = statistics.median(x["cpu_cores"] for x in got)
            per_cpu = statistics.median(x["steps_per_cpu_s"] for x in got)
            row[b] = {"median_sps": s["median"], "min": s["min"], "max": s["max"],
                      "runs": [round(x, 1) for x in sps], "cpu_cores": round(cpu, 2),
                      "steps_per_cpu_s": round(per_cpu, 1)}  # fmt: skip
        gym = runs.get((mode, env_id, n, "gymnasium"))
        for b in backends:
            if b == "gymnasium" or b not in row or not gym:
                continue
            mine = runs[(mode, env_id, n, b)]
            row[f"{b}_over_gymnasium"] = round(
                row[b]["median_sps"] / row["gymnasium"]["median_sps"], 3
            )
            paired = [x["sps"] / g["sps"] for x, g in zip(mine, gym, strict=False)]
            row[f"{b}_over_gymnasium_by_round"] = harness.spread(paired, 3)
            row[f"{b}_over_gymnasium_per_cpu_s"] = round(
                row[b]["steps_per_cpu_s"] / row["gymnasium"]["steps_per_cpu_s"], 3
            )
        rows.append(row)
    return rows


def markdown(doc: dict[str, Any]) -> str:
    args, meta = doc["args"], doc["machine"]
    present = [b for b in doc["backends"] if any(b in r for r in doc["rows"])]
    others = [b for b in present if b != "gymnasium"]
    versions = ", ".join(f"{k} {meta[k]}" for k in ("ale_py", "envpool") if meta.get(k))
    lines = [
        f"# Actor SPS by env backend: {', '.join(present)}",
        "",
        f"`{doc['command']}` on {harness.machine_line(meta)}, {versions}, 1 torch thread; "
        f"{doc['date']}; load average (1, 5, 15 min) {doc['load_before']} before, "
        f"{doc['load_after']} after (the CPUs are shared with other work).",
        "",
        "Each figure is one configuration in a fresh process: "
        f"{args['warmup_s']:g} s warm-up, then env steps per wall second over a "
        f"{args['window_s']:g} s window; median (min-max) over {args['rounds']} interleaved "
        "rounds. *policy*: the real `EnvRunner.sample()` (T="
        f"{args['num_steps']}) with a fresh model as the actor builds it (the Nature CNN for "
        "Atari), 1 torch thread. *raw*: the vector env stepped with random actions, no "
        "policy. gymnasium = `SyncVectorEnv` over ppomq's Atari pipeline (AtariPreprocessing, "
        "frame stack); ale = ale-py's C++ `AtariVectorEnv`, its threads one per env up to the "
        f"CPUs ({meta['cpus']} here). *by round*: the median (min-max) of each round's own "
        "ratio, the two backends having run back to back. CPU = process CPU seconds per wall "
        "second (C++ threads included); *steps per CPU s* = env steps per process CPU second, "
        "what a step costs whatever share of the shared cores the process got.",
    ]
    for note in doc["skipped"].values():
        lines += ["", f"Left out: {note}."]
    for mode in MODES:
        rows = [r for r in doc["rows"] if r["mode"] == mode]
        if not rows:
            continue
        head = ["env", "N", *(f"{b} SPS" for b in present),
                *(f"{b} / gymnasium, by round" for b in others),
                *(f"CPU {b}" for b in present), *(f"steps per CPU s, {b}" for b in present),
                *(f"{b} / gymnasium per CPU s" for b in others)]  # fmt: skip
        lines += ["", f"## {mode}: {MODE_TITLES[mode]}", "", "| " + " | ".join(head) + " |",
                  "|---|" + "---:|" * (len(head) - 1)]  # fmt: skip
        for r in rows:
            cells = [r["env_id"], str(r["num_envs"])]
            for b in present:
                x = r.get(b)
                cells.append(
                    f"{x['median_sps']:,.0f} ({x['min']:,.0f}-{x['max']:,.0f})" if x else "–"
                )
            for b in others:
                ratio = r.get(f"{b}_over_gymnasium_by_round")
                cells.append(
                    f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})"
                    if ratio
                    else "–"
                )
            for b in present:
                cells.append(f"{r[b]['cpu_cores']:.2f}" if b in r else "–")
            for b in present:
                cells.append(f"{r[b]['steps_per_cpu_s']:,.0f}" if b in r else "–")
            for b in others:
                ratio = r.get(f"{b}_over_gymnasium_per_cpu_s")
                cells.append(f"{ratio:.2f}x" if ratio is not None else "–")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env-ids", default=",".join(ENV_IDS))
    ap.add_argument("--num-envs", default=",".join(map(str, NUM_ENVS)))
    ap.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="of gymnasium, ale, envpool; any that cannot run here is left out",
    )
    ap.add_argument("--modes", default=",".join(MODES), help="policy, raw or both")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--num-steps", type=int, default=128)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--window-s", type=float, default=8.0)
    ap.add_argument("--out", default=str(harness.RESULTS / "actor_backends"))
    harness.add_lock_option(ap)
    args = ap.parse_args(argv)
    bench_run = harness.Run("actor_backends", argv)
    env_ids, backends, modes = _csv(args.env_ids), _csv(args.backends), _csv(args.modes)
    counts = [int(x) for x in _csv(args.num_envs)]
    if unknown := [b for b in backends if b not in BACKENDS] + [m for m in modes if m not in MODES]:
        ap.error(f"unknown backend or mode {unknown}: backends are {BACKENDS}, modes {MODES}")
    skipped = skipped_backends(backends, env_ids)
    for note in skipped.values():
        print(f"left out: {note}", flush=True)
    load_before = harness.loadavg()

    def run(config: tuple[str, str, int, str], r: int) -> dict[str, Any]:
        mode, env_id, n, backend = config
        res = measure({"mode": mode, "env_id": env_id, "num_envs": n, "backend": backend,
                       "num_steps": args.num_steps, "warmup_s": args.warmup_s,
                       "window_s": args.window_s})  # fmt: skip
        print(f"round {r}: {mode} {env_id} N={n} {backend}: {res['sps']:.0f} SPS", flush=True)
        return res

    todo = configs(env_ids, counts, backends, modes)
    runs = harness.interleave(todo, args.rounds, run, order="reverse", lock=args.lock)
    load_after = harness.loadavg()
    meta = harness.machine(ale_py=harness.package_version("ale-py"),
                           envpool=harness.package_version("envpool"), torch_threads=1)  # fmt: skip
    doc = {"command": harness.command_line("actor_backends", argv), "machine": meta,
           "date": harness.utc_now(), "args": vars(args), "backends": backends,
           "skipped": skipped, "load_before": load_before, "load_after": load_after,
           "rows": summarise(runs, backends)}  # fmt: skip
    out = Path(args.out)
    print(harness.write_results(out.parent, out.name, doc, markdown(doc), bench_run))


if __name__ == "__main__":
    main()
