"""The learner group's update alone: W ranks, each one process with one torch thread (as
the learner runs), share one batch of a fixed total size and run the PPO update together
(gloo all-reduces over loopback), against one learner alone on the whole batch.

    .venv/bin/python -m benchmarks.group_update [--world 1,2] [--cases cartpole,halfcheetah]
        [--rounds 5] [--updates 5] [--out benchmarks/results/group_update]

This is the regime DD-PPO is for, a learner that is the bottleneck, with nothing else on
the machine: no actors, no Redis, so each rank has a core of its own when W <= the cores.
Time per update is rank 0's wall time from a barrier to the end of its update; the
all-reduce time is the part of it spent in collectives (waits for the slowest rank
included). S = T1 / TW, E = S / W. W = 1 is the learner alone (no process group at all);
W values run interleaved round by round, each round a fresh set of processes.

Cases, with the presets' updates: cartpole (4 batches of N=8 x T=32, 20 epochs of 256:
80 SGD steps); halfcheetah (2 batches of T=1024 x N=1, 10 epochs of 64: 320 steps, obs
normalization); atari (nature-cnn, 2 batches of N=4 x T=128, 4 epochs of 256: 16 steps).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks import harness
from benchmarks.learner_update import ATARI, CARTPOLE, CHEETAH, make_batch
from ppomq.core.models import build_model

# name: (model spec, batches, T, N, PPOConfig overrides)
CASES: dict[str, tuple[dict[str, Any], int, int, int, dict[str, Any]]] = {
    "cartpole": (CARTPOLE, 4, 32, 8, {}),
    "halfcheetah": (CHEETAH, 2, 1024, 1,
                    {"update_epochs": 10, "minibatch_size": 64, "clip_vloss": True}),
    "atari": (ATARI, 2, 128, 4,
              {"update_epochs": 4, "minibatch_size": 256, "clip_coef": 0.1, "ent_coef": 0.01}),
}  # fmt: skip


def _rank(rank: int, world: int, port: int, case: str, updates: int, out: str) -> None:
    from ppomq.learner.group import GroupSpec, LearnerGroup
    from ppomq.learner.trainer import PPOConfig, PPOTrainer

    torch.set_num_threads(1)
    spec, n_batches, t, n, overrides = CASES[case]
    torch.manual_seed(0)
    policy = build_model(spec)
    batches = [make_batch(policy, seed, t=t, n=n) for seed in range(n_batches)]
    group = None
    if world > 1:
        group = LearnerGroup(
            GroupSpec(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port),
            backend="gloo", timeout_s=120, device=torch.device("cpu"),
        )  # fmt: skip
    config = PPOConfig(anneal_lr=False, gradients="auto", **overrides)
    trainer = PPOTrainer(policy=policy, config=config, group=group)
    mine = batches[rank::world]
    barrier = torch.zeros(1)
    trainer.update(mine, 0)  # warm-up: first-call allocations, gloo's pairs
    times, comm = [], []
    for _ in range(updates):
        if group is not None:
            group.sum_(barrier)
        c0 = group.comm_s if group is not None else 0.0
        t0 = time.perf_counter()
        trainer.update(mine, 0)
        times.append(time.perf_counter() - t0)
        comm.append((group.comm_s - c0) if group is not None else 0.0)
    if group is not None:
        group.close()
    if rank == 0:
        Path(out).write_text(json.dumps({"update_s": times, "allreduce_s": comm}))


def run_world(case: str, world: int, updates: int) -> dict[str, list[float]]:
    """One fresh set of `world` rank processes; rank 0's per-update times."""
    from ppomq.core.store.embedded import free_port

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "rank0.json")
        port = free_port()
        procs = [
            ctx.Process(target=_rank, args=(r, world, port, case, updates, out))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=1800)
        codes = [p.exitcode for p in procs]
        if codes != [0] * world:
            raise RuntimeError(f"{case} W={world}: ranks exited {codes}")
        return json.loads(Path(out).read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", default="1,2", help="W values, comma-separated")
    ap.add_argument("--cases", default="cartpole,halfcheetah", help=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--updates", type=int, default=5, help="timed updates per round")
    ap.add_argument("--out", default="benchmarks/results/group_update")
    args = ap.parse_args(argv)
    bench_run = harness.Run("group_update", argv)
    worlds = [int(w) for w in args.world.split(",")]
    if 1 not in worlds:
        ap.error("--world must include 1: the baseline of S")
    cases = args.cases.split(",")
    samples: dict[tuple[str, int], dict[str, list[float]]] = {}
    load_before = os.getloadavg()[0]
    for r in range(args.rounds):
        order = worlds if r % 2 == 0 else worlds[::-1]
        for case in cases:
            for w in order:
                got = run_world(case, w, args.updates)
                key = samples.setdefault((case, w), {"update_s": [], "allreduce_s": []})
                for k in key:
                    key[k].append(statistics.median(got[k]))  # one figure per round
                print(f"round {r} {case} W={w}: update {key['update_s'][-1] * 1e3:.1f} ms, "
                      f"all-reduce {key['allreduce_s'][-1] * 1e3:.1f} ms", flush=True)  # fmt: skip
    rows = []
    for case in cases:
        t1 = statistics.median(samples[(case, 1)]["update_s"])
        for w in worlds:
            s = samples[(case, w)]
            tw = statistics.median(s["update_s"])
            speedup = t1 / tw
            rows.append({
                "case": case, "world": w, "update_ms": tw * 1e3,
                "update_ms_min": min(s["update_s"]) * 1e3,
                "update_ms_max": max(s["update_s"]) * 1e3,
                "allreduce_ms": statistics.median(s["allreduce_s"]) * 1e3,
                "speedup": speedup, "efficiency": speedup / w,
            })  # fmt: skip
    command = "python -m benchmarks.group_update " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"
    )
    load_after = os.getloadavg()[0]
    machine = (f"{mp.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
               f"torch {torch.__version__}, python {platform.python_version()}; 1-minute "
               f"load average {load_before:.2f} before, {load_after:.2f} after")  # fmt: skip
    doc = {"command": command, "machine": machine, "rows": rows,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    out = Path(args.out)
    harness.write_results(out.parent, out.name, doc, render(doc), bench_run)
    print(render(doc))
    return 0


def render(doc: dict[str, Any]) -> str:
    lines = [
        "# Learner group: the update alone, W ranks on one batch",
        "",
        f"`{doc['command']}` on {doc['machine']}; finished {doc['finished']}. Each rank is one "
        "process with one torch thread; no actors or Redis of ppomq's run beside them (the "
        "load average says what else did). Update = rank "
        "0's wall time from a barrier to the end of its update, the median over rounds of "
        "each round's median; all-reduce = its time in collectives, waits for the slowest "
        "rank included. S = T1 / TW (the same total batch), E = S / W; W = 1 is a learner "
        "alone, with no process group.",
        "",
        "| case | W | update, ms (min–max) | all-reduce, ms | S | E = S/W |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['case']} | {r['world']} | {r['update_ms']:.1f} ({r['update_ms_min']:.1f}–"
            f"{r['update_ms_max']:.1f}) | {r['allreduce_ms']:.1f} | {r['speedup']:.2f} | "
            f"**{r['efficiency']:.2f}** |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
