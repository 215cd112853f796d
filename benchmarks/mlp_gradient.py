"""Is the hand-derived MLP backward (ppomq.learner.mlp_grad) still worth its code?

    nice -n 10 .venv/bin/python -m benchmarks.mlp_gradient --lock /tmp/ppomq-bench.lock

One whole PPO update of the default run (the cartpole preset: 64-64 tanh networks, two
actors' 8 x 32 batches = 512 samples, 2 minibatches of 256, 20 epochs: 40 SGD steps), each
step a gradient, a gradient-norm clip and an Adam step, timed three ways, interleaved
repeat by repeat so that all see the same machine, on one torch thread (as the learner):

  analytic        what the learner runs for MLPs (`--gradients auto`): mlp_grad.MLPGradient,
                  flat clip, FlatAdam
  autograd+fused  the plain library way: model.evaluate + ppo_loss + backward(),
                  clip_grad_norm_, torch.optim.Adam(fused=True)
  autograd+flat   `--gradients autograd`: AutogradGradient, flat clip, FlatAdam

The verdict: mlp_grad.py stays only while analytic is at least KEEP_RATIO times faster
than autograd+fused (medians). Writes benchmarks/results/mlp_gradient.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import harness
from ppomq.core.models import build_model
from ppomq.learner.flat_params import FlatAdam, FlatParameters
from ppomq.learner.gradients import AutogradGradient, Minibatch
from ppomq.learner.mlp_grad import MLPGradient
from ppomq.learner.ppo_loss import ppo_loss

KEEP_RATIO = 1.3
SPEC = {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
        "hidden": [64, 64], "activation": "tanh", "obs_norm": None}  # fmt: skip
SAMPLES, MINIBATCHES, EPOCHS = 512, 2, 20
LR, MAX_GRAD_NORM, ADAM_EPS = 1e-3, 0.5, 1e-5
COEFS = {"clip_coef": 0.2, "vf_coef": 0.5, "ent_coef": 0.0, "clip_vloss": False,
         "norm_adv": True, "objective": "clip", "kl_coef": 0.0}  # fmt: skip
WAYS = ("analytic", "autograd+fused", "autograd+flat")
BASELINE = "autograd+fused"

Step = Callable[[Minibatch], None]


def make_batch(seed: int) -> Minibatch:
    """SAMPLES rows as the learner sees them: actions, log-probs and values from the policy."""
    torch.manual_seed(seed)
    model = build_model(SPEC)
    obs = torch.randn(SAMPLES, 4)
    actions = torch.randint(0, 2, (SAMPLES,))
    with torch.no_grad():
        logp, _, values = model.evaluate(obs, actions)
    return Minibatch(
        obs, actions, logp, values, torch.randn(SAMPLES), values + torch.randn(SAMPLES)
    )


def flat_step(gradient: str, seed: int) -> Step:
    """The learner's step: a gradient engine into flat buffers, flat clip, FlatAdam."""
    torch.manual_seed(seed)
    model = build_model(SPEC)
    flat = FlatParameters(model)
    optimizer = FlatAdam(flat.data, flat.grad, eps=ADAM_EPS)
    engine = MLPGradient(model) if gradient == "analytic" else AutogradGradient(model, flat)

    def step(mb: Minibatch) -> None:
        engine(mb, **COEFS)
        flat.clip_grad_norm_(MAX_GRAD_NORM)
        optimizer.step(LR)

    return step


def fused_step(seed: int) -> Step:
    """The library's way: autograd, clip_grad_norm_, torch.optim.Adam(fused=True)."""
    torch.manual_seed(seed)
    model = build_model(SPEC)
    params = list(model.parameters())
    optimizer = torch.optim.Adam(params, lr=LR, eps=ADAM_EPS, fused=True)

    def step(mb: Minibatch) -> None:
        optimizer.zero_grad(set_to_none=False)
        new_logp, entropy, new_values = model.evaluate(mb.obs, mb.actions)
        loss, _ = ppo_loss(new_logp, mb.old_logp, mb.advantages, new_values, mb.old_values,
                           mb.returns, entropy, **COEFS)  # fmt: skip
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM, foreach=True)
        optimizer.step()

    return step


def make_step(way: str, seed: int) -> Step:
    return fused_step(seed) if way == "autograd+fused" else flat_step(way.split("+")[0], seed)


def one_update(step: Step, batch: Minibatch, seed: int) -> float:
    """Seconds for one update: EPOCHS epochs of MINIBATCHES shuffled minibatch steps."""
    generator = torch.Generator().manual_seed(seed)
    size = SAMPLES // MINIBATCHES
    t0 = time.perf_counter()
    for _ in range(EPOCHS):
        perm = torch.randperm(SAMPLES, generator=generator)
        shuffled = Minibatch(*(t[perm] for t in batch))
        for mb in zip(*(torch.split(t, size) for t in shuffled), strict=True):
            step(Minibatch(*mb))
    return time.perf_counter() - t0


def measure(repeats: int, updates: int) -> dict[str, list[float]]:
    """Per way, `repeats` medians of `updates` updates each, the ways interleaved."""
    batch = make_batch(0)
    steps = {way: make_step(way, 1) for way in WAYS}
    for way in WAYS:  # warm-up: first-call allocations and dispatch caches
        one_update(steps[way], batch, 0)

    def timed(way: str, r: int) -> float:
        return statistics.median(
            one_update(steps[way], batch, r * updates + u) for u in range(updates)
        )

    return harness.interleave(WAYS, repeats, timed)  # rotating: no way always goes first


def report(times: dict[str, list[float]], repeats: int, updates: int) -> dict[str, Any]:
    medians = {way: statistics.median(ts) for way, ts in times.items()}
    ratios = {way: medians[BASELINE] / m for way, m in medians.items()}
    return {
        "case": "cartpole preset: 64-64 tanh, 512 samples, 2 minibatches of 256, 20 epochs",
        "sgd_steps_per_update": EPOCHS * MINIBATCHES,
        "repeats": repeats,
        "updates_per_repeat": updates,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": harness.machine(torch_threads=torch.get_num_threads()),
        "update_ms_median": {w: round(m * 1e3, 3) for w, m in medians.items()},
        "update_ms_per_repeat": {w: [round(t * 1e3, 3) for t in ts] for w, ts in times.items()},
        "speedup_vs_" + BASELINE: {w: round(r, 3) for w, r in ratios.items()},
        "keep_ratio": KEEP_RATIO,
        "keep_mlp_grad": ratios["analytic"] >= KEEP_RATIO,
    }


def markdown(doc: dict[str, Any]) -> str:
    ratios = doc["speedup_vs_" + BASELINE]
    lines = [
        "# MLP gradient: hand-derived backward against autograd",
        "",
        f"One PPO update of the {doc['case']} ({doc['sgd_steps_per_update']} SGD steps), "
        f"torch {doc['torch']}, {doc['torch_threads']} thread; median of {doc['repeats']} "
        f"interleaved repeats of {doc['updates_per_repeat']} updates each.",
        "",
        f"| way | ms per update | speed-up vs {BASELINE} |",
        "|---|---:|---:|",
        *(f"| {w} | {doc['update_ms_median'][w]:.2f} | {ratios[w]:.2f}x |" for w in WAYS),
        "",
        f"Verdict: analytic is {ratios['analytic']:.2f}x autograd+fused; the bar is "
        f"{doc['keep_ratio']}x, so mlp_grad.py " + ("stays." if doc["keep_mlp_grad"] else "goes."),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(parser)
    args = parser.parse_args(argv)
    bench_run = harness.Run("mlp_gradient", argv)
    torch.set_num_threads(1)
    with harness.BenchLock(args.lock):
        times = measure(args.repeats, args.updates)
    doc = {"command": harness.command_line("mlp_gradient", argv), "date": harness.utc_now(),
           **report(times, args.repeats, args.updates)}  # fmt: skip
    print(harness.write_results(args.out, "mlp_gradient", doc, markdown(doc), bench_run))


if __name__ == "__main__":
    main()
