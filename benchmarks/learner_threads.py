"""The learner's PPO update by `--torch-threads` (and `--device`): time per update.

    .venv/bin/python -m benchmarks.learner_threads [--threads 1,2] [--device cpu] \
        [--rounds 7] [--updates 20] [--quick] [--lock /tmp/ppomq-bench.lock]

The update PPOTrainer runs in the learner (`--gradients auto`: the analytic MLP path; with
`--cases cnn`, autograd through the atari preset's Nature CNN update) on
the cases of benchmarks/learner_update.py: the default CartPole MLP (64-64 tanh, 20
epochs of 256-sample minibatches) with one and two actors' batches, and the mujoco
preset's HalfCheetah update. Thread counts are interleaved round by round (each round:
a fresh trainer per count, 3 warm-up updates, then the median of `--updates`), so that
every count sees the same machine; the figure is the median of the rounds.

Writes benchmarks/results/learner_threads.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks import harness
from benchmarks.learner_update import ATARI_CASE, CASES, make_batch
from ppomq.core.models import build_model
from ppomq.learner.device import describe, resolve_device
from ppomq.learner.trainer import PPOConfig, PPOTrainer


def time_updates(
    threads: int, seed: int, *, case: tuple, device: torch.device, updates: int
) -> float:
    """Median seconds per update with `threads` torch threads over `updates` updates after
    3 warm-up updates."""
    torch.set_num_threads(threads)
    _, spec, n_batches, t, n, overrides = case
    torch.manual_seed(seed)
    policy = build_model(spec)
    batches = [make_batch(policy, seed * 100 + i, t, n) for i in range(n_batches)]
    trainer = PPOTrainer(policy=policy, config=PPOConfig(anneal_lr=False, **overrides),
                         device=device)  # fmt: skip
    for _ in range(3):
        trainer.update(batches, 0)
    times = []
    for _ in range(updates):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        trainer.update(batches, 0)  # ends in a host read of its statistics: synchronous
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(
    threads: list[int], device_choice: str, rounds: int, updates: int, which: str = "mlp"
) -> dict[str, Any]:
    device = resolve_device(device_choice)
    load_before = harness.load1()
    cases = {}
    for case in CASES if which == "mlp" else [ATARI_CASE]:
        name, _, n_batches, t, n, overrides = case
        cfg = PPOConfig(**overrides)
        samples = n_batches * t * n
        sgd_steps = cfg.update_epochs * max(1, round(samples / cfg.minibatch_size))
        timed = partial(time_updates, case=case, device=device, updates=updates)
        per = harness.interleave(threads, rounds, timed, order="fixed")
        base = statistics.median(per[threads[0]])
        cases[name] = {
            "samples": samples,
            "sgd_steps_per_update": sgd_steps,
            "threads": {
                str(k): {
                    "update_ms_median": round(statistics.median(v) * 1e3, 2),
                    "update_ms_min": round(min(v) * 1e3, 2),
                    "update_ms_max": round(max(v) * 1e3, 2),
                    "speedup_vs_first": round(base / statistics.median(v), 2),
                }
                for k, v in per.items()
            },
        }
    return {
        "benchmark": "learner_threads",
        "device": describe(device),
        "machine": harness.machine(),
        "loadavg_before_after": [load_before, harness.load1()],
        "rounds": rounds,
        "updates_per_round": updates,
        "cases": cases,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Learner update by --torch-threads",
        "",
        f"`{result['command']}`",
        "",
        f"Device {result['device']}; {harness.machine_line(result['machine'])}; {result['date']}; "
        "1-minute load average "
        f"{result['loadavg_before_after'][0]} before, {result['loadavg_before_after'][1]} "
        f"after (a shared machine). Median of {result['rounds']} interleaved rounds, each "
        f"the median of {result['updates_per_round']} updates; `--gradients auto` (the "
        "analytic path for an MLP, autograd for the Nature CNN), what the learner runs.",
        "",
        "| update | torch threads | ms per update (min–max) | speed-up vs the first |",
        "|---|---|---|---|",
    ]
    for name, case in result["cases"].items():
        for k, e in case["threads"].items():
            lines.append(
                f"| {name}: {case['samples']} samples, {case['sgd_steps_per_update']} SGD "
                f"steps | {k} | {e['update_ms_median']} ({e['update_ms_min']}–"
                f"{e['update_ms_max']}) | {e['speedup_vs_first']}x |"
            )
    if not result["device"].startswith("cuda"):
        lines += ["", "CUDA was not measured here: this machine has no GPU. `--device cuda` "
                  "runs the same cases where one exists."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--device", default="cpu", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="1 round of 2 updates (smoke)")
    parser.add_argument(
        "--cases", choices=["mlp", "cnn"], default="mlp",
        help="mlp: learner_update's MLP cases; cnn: the atari preset's Nature CNN update "
        "(writes learner_threads_cnn.*)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(parser)
    args = parser.parse_args(argv)
    bench_run = harness.Run("learner_threads", argv)
    rounds, updates = (1, 2) if args.quick else (args.rounds, args.updates)
    threads = [int(k) for k in args.threads.split(",")]
    with harness.BenchLock(args.lock):
        result = run(threads, args.device, rounds, updates, args.cases)
    result = {
        "command": harness.command_line("learner_threads", argv),
        "date": harness.utc_now(),
        **result,
    }
    stem = "learner_threads" + ("_cnn" if args.cases == "cnn" else "")
    print(harness.write_results(args.out, stem, result, markdown(result), bench_run))


if __name__ == "__main__":
    main()
