"""The atari preset's PPO update on the CPU: the Nature CNN's input in channels-last memory
against NCHW.

    .venv/bin/python -m benchmarks.cnn_update [--rounds 5] [--updates 5] [--threads 1,2] [--quick]

One process. The update is the atari preset's: two actors' batches of 4 envs x 128 steps
(1,024 uint8 frame stacks), 4 epochs of 256-sample minibatches, clip 0.1, entropy 0.01,
pixels normalized by their running statistics (norm_obs), through the learner's own
PPOTrainer (autograd into flat gradients, FlatAdam). Formats, interleaved round by round at
each torch thread count so that both see the same machine:
  nchw           the convolutions on NCHW input: what the learner did before (the baseline)
  channels-last  what NatureCNN.features does on the CPU: the normalized pixels made
                 channels-last before the first convolution (oneDNN's preferred layout)
The weights stay NCHW either way (they are views into the learner's one flat buffer).

Writes benchmarks/results/cnn_update.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from benchmarks import harness
from benchmarks.learner_update import ATARI, make_batch
from ppomq.core.models.cnn import NatureCNN, pixels_in
from ppomq.learner.trainer import PPOConfig, PPOTrainer

SPEC = {**ATARI, "obs_norm": {"clip": 5.0, "epsilon": 1e-8}}
CONFIG = PPOConfig(update_epochs=4, minibatch_size=256, clip_coef=0.1, ent_coef=0.01,
                   anneal_lr=False)  # fmt: skip
BATCHES, T, N = 2, 128, 4
QUICK_T = 32  # --quick: a quarter of the batch, one minibatch per epoch
FORMATS = ("nchw", "channels-last")
BASELINE = "nchw"


class NCHWNatureCNN(NatureCNN):
    """The baseline: the trunk on NCHW input, as the learner ran it before."""

    def features(self, obs: Tensor) -> Tensor:
        x = pixels_in(obs, self.obs_norm, self.fc.weight.dtype)
        for conv in self.conv:
            x = torch.relu(conv(x))
        return torch.relu(self.fc(x.flatten(1)))


def time_updates(fmt: str, seed: int, *, updates: int, steps: int = T) -> float:
    """Median seconds per update over `updates` updates after one warm-up update."""
    torch.manual_seed(seed)
    policy = (NCHWNatureCNN if fmt == BASELINE else NatureCNN)(SPEC)
    trainer = PPOTrainer(policy=policy, config=CONFIG)
    batches = [make_batch(policy, seed * 100 + i, steps, N) for i in range(BATCHES)]
    trainer.update(batches, 0)
    times = []
    for _ in range(updates):
        t0 = time.perf_counter()
        trainer.update(batches, 0)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(rounds: int, updates: int, threads: list[int], steps: int = T) -> dict[str, Any]:
    sgd_steps = CONFIG.update_epochs * round(BATCHES * steps * N / CONFIG.minibatch_size)
    rows = []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        per_update = harness.interleave(
            FORMATS, rounds, lambda fmt, r: time_updates(fmt, r + 1, updates=updates, steps=steps)
        )
        base = statistics.median(per_update[BASELINE])
        for fmt, values in per_update.items():
            med = statistics.median(values)
            ratios = [b / v for b, v in zip(per_update[BASELINE], values, strict=True)]
            rows.append({
                "threads": n_threads, "format": fmt,
                "update_s_median": round(med, 3), "update_s_min": round(min(values), 3),
                "update_s_max": round(max(values), 3),
                "sgd_step_ms_median": round(med / sgd_steps * 1e3, 1),
                "speedup_vs_baseline": round(base / med, 2),
                "speedup_per_round_median": round(statistics.median(ratios), 2),
            })  # fmt: skip
    return {
        "benchmark": "cnn_update",
        "machine": harness.machine(),
        "rounds": rounds,
        "updates_per_round": updates,
        "samples_per_update": BATCHES * steps * N,
        "sgd_steps_per_update": sgd_steps,
        "baseline": BASELINE,
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# The atari preset's update on the CPU: channels-last against NCHW",
        "",
        f"`{result['command']}` — {harness.machine_line(result['machine'])}; "
        f"{result['samples_per_update']} samples, {result['sgd_steps_per_update']} SGD steps "
        f"per update; median of {result['rounds']} interleaved rounds (each the median of "
        f"{result['updates_per_round']} updates). Speed-up against `{result['baseline']}`: "
        "of the medians, and the median of the rounds' own ratios.",
        "",
        "| torch threads | input format | s per update (min–max) | ms per SGD step "
        "| speed-up | speed-up per round |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['threads']} | {r['format']} | {r['update_s_median']} "
            f"({r['update_s_min']}–{r['update_s_max']}) | {r['sgd_step_ms_median']} "
            f"| {r['speedup_vs_baseline']}x | {r['speedup_per_round_median']}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 1 update of a quarter of the batch (smoke)"
    )
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(parser)
    args = parser.parse_args(argv)
    bench_run = harness.Run("cnn_update", argv)
    rounds, updates = (1, 1) if args.quick else (args.rounds, args.updates)
    steps = QUICK_T if args.quick else T
    threads = [int(t) for t in args.threads.split(",")]
    with harness.BenchLock(args.lock):
        result = run(rounds, updates, threads, steps)
    result = {"command": harness.command_line("cnn_update", argv), "date": harness.utc_now(),
              **result}  # fmt: skip
    print(harness.write_results(args.out, "cnn_update", result, markdown(result), bench_run))


if __name__ == "__main__":
    main()
