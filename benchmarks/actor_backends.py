"""Actor SPS with the gymnasium and envpool env backends.

What one actor does, without sockets: `make_vector_env(..., backend=B)`, the real
`EnvRunner`, a freshly initialized model as the actor builds it (the Nature CNN for Atari,
an MLP 64,64 tanh for MuJoCo), `sample()` back to back with one torch thread. SPS = env steps
(T x N per rollout) per wall second over a window after a warm-up, each measurement in a
fresh process; rounds interleave the configurations, and the table gives the median (and
min-max) over rounds.

    .venv/bin/python -m benchmarks.actor_backends --lock /tmp/ppomq-bench.lock
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks import harness

CASES = [
    ("ALE/Pong-v5", 4),
    ("ALE/Pong-v5", 8),
    ("HalfCheetah-v5", 1),
    ("HalfCheetah-v5", 8),
]
BACKENDS = ("gymnasium", "envpool")


def worker(conn: Connection, cfg: dict[str, Any]) -> None:
    import torch

    from ppomq.actor.runner import EnvRunner
    from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
    from ppomq.core.models import build_model, model_spec_for

    torch.set_num_threads(1)  # as run_actor does
    n, t, env_id = cfg["num_envs"], cfg["num_steps"], cfg["env_id"]
    spec = rollout_spec_for(env_id, run_id="bench", num_steps=t, max_bytes=1 << 30)
    seeds = [env_seed(1, 0, i) for i in range(n)]
    envs = make_vector_env(env_id, n, seeds, backend=cfg["backend"])
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
    wall = time.perf_counter() - t0
    conn.send({"sps": steps / wall, "cpu_cores": (time.process_time() - c0) / wall})
    envs.close()


def measure(cfg: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker, args=(child, cfg))
    proc.start()
    out = parent.recv()
    proc.join(60)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-steps", type=int, default=128)
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--window-s", type=float, default=8.0)
    ap.add_argument("--out", default=str(harness.RESULTS / "actor_backends"))
    harness.add_lock_option(ap)
    args = ap.parse_args(argv)
    import envpool

    load_before = harness.load1()

    def run(config: tuple[str, int, str], r: int) -> dict[str, Any]:
        env_id, n, backend = config
        res = measure({"env_id": env_id, "num_envs": n, "backend": backend,
                       "num_steps": args.num_steps, "warmup_s": args.warmup_s,
                       "window_s": args.window_s})  # fmt: skip
        print(f"round {r}: {env_id} N={n} {backend}: {res['sps']:.0f} SPS", flush=True)
        return res

    configs = [(e, n, b) for e, n in CASES for b in BACKENDS]
    runs = harness.interleave(configs, args.rounds, run, order="reverse", lock=args.lock)
    load_after = harness.load1()
    rows = []
    for env_id, n in CASES:
        row: dict[str, Any] = {"env_id": env_id, "num_envs": n}
        for b in BACKENDS:
            sps = [x["sps"] for x in runs[(env_id, n, b)]]
            cores = [x["cpu_cores"] for x in runs[(env_id, n, b)]]
            s = harness.spread(sps)
            row[b] = {"median_sps": s["median"], "min": s["min"], "max": s["max"],
                      "runs": sps, "cpu_cores": statistics.median(cores)}  # fmt: skip
        row["envpool_over_gymnasium"] = (
            row["envpool"]["median_sps"] / row["gymnasium"]["median_sps"]
        )
        rows.append(row)
    command = harness.command_line("actor_backends", argv)
    meta = harness.machine(envpool=envpool.__version__, torch_threads=1)
    stamp = harness.utc_now()
    data = {"command": command, "machine": meta, "date": stamp, "args": vars(args),
            "load_before": load_before, "load_after": load_after, "rows": rows}  # fmt: skip
    lines = [
        "# Actor SPS: gymnasium against envpool env backends",
        "",
        f"`{command}` on {harness.machine_line(meta)}, envpool {meta['envpool']}, 1 torch thread; "
        f"{stamp}; 1-minute load average {load_before:.2f} before, {load_after:.2f} after "
        "(the CPUs are shared with other work).",
        "",
        f"One actor without sockets: the real `EnvRunner.sample()` (T={args.num_steps}) with a "
        "fresh model as the actor builds it (Nature CNN for Pong, MLP 64,64 for HalfCheetah), "
        f"1 torch thread, {args.warmup_s:g} s warm-up then a {args.window_s:g} s window, each "
        f"in a fresh process; median (min-max) over {args.rounds} interleaved rounds. CPU = "
        "process CPU seconds per wall second (EnvPool's threads included).",
        "",
        "| env | N | gymnasium SPS | envpool SPS | envpool / gymnasium | CPU gym | CPU envpool |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        g, e = row["gymnasium"], row["envpool"]
        lines.append(
            f"| {row['env_id']} | {row['num_envs']} | {g['median_sps']:.0f} "
            f"({g['min']:.0f}-{g['max']:.0f}) | {e['median_sps']:.0f} "
            f"({e['min']:.0f}-{e['max']:.0f}) | {row['envpool_over_gymnasium']:.2f}x | "
            f"{g['cpu_cores']:.2f} | {e['cpu_cores']:.2f} |"
        )
    out = Path(args.out)
    print(harness.write_results(out.parent, out.name, data, "\n".join(lines)))


if __name__ == "__main__":
    main()
