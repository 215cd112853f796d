"""The learner's PPO update on CUDA against the CPU: time per update, same batches.

    python -m benchmarks.device.cuda_update --out DIR [--devices cpu-1,cpu-all,cuda]
        [--cases cartpole-1,cartpole-2,halfcheetah,atari] [--cpu-all-cases atari]
        [--updates 10] [--cell-s 4]

The cases are benchmarks.learner_update's (the presets' updates: CartPole with one and two
actors' batches, HalfCheetah's 320 SGD steps, the Atari preset's nature-cnn); the trainer
is the learner's own (PPOTrainer, `--gradients auto`), given each device, so a CUDA update
includes copying the batch to the GPU. Devices: cpu-1 = one torch thread (what a learner
beside its actors uses, `--torch-threads 1`), cpu-all = every CPU this process may run
on (only for --cpu-all-cases: the CNN by default, where many threads can pay; it keeps
the script inside its time), cuda = the first GPU. Per (case, device): one warm-up
update, then up to --updates timed ones, stopping early once --cell-s seconds are spent
(at least one): a slow cell (the CNN on one thread) cannot eat the whole run. Writes
DIR/cuda_update.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks import harness
from benchmarks.learner_update import ATARI_CASE, CASES, make_batch
from ppomq.core.models import build_model
from ppomq.learner.trainer import PPOConfig, PPOTrainer

CASE_BY_NAME = {
    "cartpole-1": CASES[0],
    "cartpole-2": CASES[1],
    "halfcheetah": CASES[2],
    "atari": ATARI_CASE,
}
DEVICES = ("cpu-1", "cpu-all", "cuda")


def _threads(device: str) -> int:
    return 1 if device == "cpu-1" else len(os.sched_getaffinity(0))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_cell(case: tuple, device: str, updates: int, cell_s: float) -> dict[str, Any]:
    """Seconds per update on `device`: the median of the timed updates after one warm-up."""
    _, spec, n_batches, t, n, overrides = case
    torch.set_num_threads(_threads(device))
    torch.manual_seed(0)
    policy = build_model(spec)
    batches = [make_batch(policy, 100 + i, t, n) for i in range(n_batches)]
    trainer = PPOTrainer(
        policy=policy,
        config=PPOConfig(anneal_lr=False, **overrides),
        device="cuda" if device == "cuda" else "cpu",
    )
    trainer.update(batches, 0)  # warm-up: allocations, CUDA context and kernels
    _sync(device)
    times: list[float] = []
    spent = 0.0
    while len(times) < updates and (not times or spent < cell_s):
        t0 = time.perf_counter()
        trainer.update(batches, 0)
        _sync(device)
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return {
        "update_ms_median": round(statistics.median(times) * 1e3, 2),
        "update_ms_min": round(min(times) * 1e3, 2),
        "update_ms_max": round(max(times) * 1e3, 2),
        "updates_timed": len(times),
        "torch_threads": _threads(device) if device != "cuda" else None,
    }


def run(
    cases: list[str], devices: list[str], cpu_all_cases: list[str], updates: int, cell_s: float
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in cases:
        case = CASE_BY_NAME[name]
        _, _, n_batches, t, n, overrides = case
        samples = n_batches * t * n
        cfg = PPOConfig(**overrides)
        sgd_steps = cfg.update_epochs * max(1, round(samples / cfg.minibatch_size))
        cells = {}
        for device in devices:
            if device == "cpu-all" and name not in cpu_all_cases:
                continue
            cells[device] = time_cell(case, device, updates, cell_s)
            print(f"{name} on {device}: {cells[device]['update_ms_median']} ms per update "
                  f"({cells[device]['updates_timed']} timed)", flush=True)  # fmt: skip
        base = cells.get("cpu-1", {}).get("update_ms_median")
        for cell in cells.values():
            cell["speedup_vs_cpu_1"] = round(base / cell["update_ms_median"], 2) if base else None
        out[name] = {"label": case[0], "samples": samples, "sgd_steps": sgd_steps,
                     "devices": cells}  # fmt: skip
    return out


def markdown(doc: dict[str, Any]) -> str:
    gpu = doc.get("gpu") or "no GPU"
    lines = [
        "# The learner's update: CUDA against the CPU",
        "",
        f"`{doc['command']}` on {harness.machine_line(doc['machine'])}, {gpu}; "
        f"{doc['date']}. The learner's PPOTrainer (`--gradients auto`) on the presets' "
        "updates, the same batches on every device (a CUDA update includes the batch's copy "
        "to the GPU); median of the timed updates after one warm-up. cpu-1: one torch "
        "thread (the learner beside its actors); cpu-all: every CPU.",
        "",
        "| update | samples | SGD steps | device | ms per update (min–max) | timed "
        "| speed-up vs cpu-1 |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for c in doc["cases"].values():
        for device, e in c["devices"].items():
            dev = device if device != "cpu-all" else f"cpu-all ({e['torch_threads']} threads)"
            lines.append(
                f"| {c['label']} | {c['samples']} | {c['sgd_steps']} | {dev} "
                f"| {e['update_ms_median']} ({e['update_ms_min']}–{e['update_ms_max']}) "
                f"| {e['updates_timed']} | {e['speedup_vs_cpu_1'] or '–'}x |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--devices", default=",".join(DEVICES))
    p.add_argument("--cases", default=",".join(CASE_BY_NAME))
    p.add_argument("--cpu-all-cases", default="atari", help="the cases cpu-all runs")
    p.add_argument("--updates", type=int, default=10, help="timed updates per cell, at most")
    p.add_argument("--cell-s", type=float, default=4.0, help="timing budget per cell")
    args = p.parse_args(argv)
    bench_run = harness.Run("device.cuda_update", argv)
    devices = [d for d in args.devices.split(",") if d]
    cases = [c for c in args.cases.split(",") if c]
    if bad := [d for d in devices if d not in DEVICES]:
        p.error(f"--devices: unknown {bad}; choose from {list(DEVICES)}")
    cpu_all_cases = [c for c in args.cpu_all_cases.split(",") if c]
    if bad := [c for c in [*cases, *cpu_all_cases] if c not in CASE_BY_NAME]:
        p.error(f"--cases/--cpu-all-cases: unknown {bad}; choose from {list(CASE_BY_NAME)}")
    if "cuda" in devices and not torch.cuda.is_available():
        p.error("--devices cuda: torch sees no GPU here; leave cuda out")
    doc: dict[str, Any] = {
        "benchmark": "cuda_update",
        "command": harness.command_line("device.cuda_update", argv),
        "date": harness.utc_now(),
        "machine": harness.machine(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cases": run(cases, devices, cpu_all_cases, args.updates, args.cell_s),
    }
    print(harness.write_results(args.out, "cuda_update", doc, markdown(doc), bench_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
