"""The Nature CNN's forward pass at the actor's batch sizes: which inference path is fastest.

    .venv/bin/python -m benchmarks.cnn_forward [--quick] [--compile]

What an actor does per env step: `act(obs)` on N envs' stacked uint8 frames [N, 4, 84, 84]
(numpy in; action, logp and value out as numpy, sampling included), with one torch thread
(services/actor sets torch.set_num_threads(1)). Each candidate path is timed at N = 1, 8,
16; a round times every (path, N) once, in a fresh random order, as the median of a burst
of calls; the figure reported is the median over rounds (interleaving spreads the
machine's noise over every path alike). Every path is checked against the nn.Module's
float32 forward on the same observations (max |difference| of logits and value): a path
is a candidate only if it agrees to float tolerance (1e-4). Results go to
benchmarks/results/cnn_forward.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks import harness
from ppomq.core.models import build_model
from ppomq.core.models.cnn import SCALE, NatureCNN

SPEC = {"arch": "nature-cnn", "obs_shape": [4, 84, 84], "action": {"kind": "categorical", "n": 6}}
SIZES = (1, 8, 16)
TOLERANCE = 1e-4

Outputs = Callable[[np.ndarray], tuple[Tensor, Tensor]]  # obs -> (logits, value)


class Functional:
    """F.conv2d / addmm on copies of the weights; the knobs are what is measured."""

    def __init__(
        self,
        model: NatureCNN,
        *,
        channels_last: bool = False,
        fold_scale: bool = False,
        inplace: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.fmt, self.fold, self.dtype = fmt, fold_scale, dtype
        self.relu = torch.relu_ if inplace else torch.relu
        with torch.no_grad():
            self.convs = []
            for i, c in enumerate(model.conv):
                w = c.weight.detach() / SCALE if (fold_scale and i == 0) else c.weight.detach()
                w = w.to(dtype).contiguous(memory_format=fmt)
                self.convs.append((w, c.bias.detach().to(dtype).clone(), c.stride))
            self.fc = (model.fc.weight.detach().t().contiguous().to(dtype), model.fc.bias.to(dtype))
            self.heads = (
                torch.cat([model.pi.weight, model.v.weight]).detach().t().contiguous().to(dtype),
                torch.cat([model.pi.bias, model.v.bias]).detach().to(dtype),
            )

    def __call__(self, obs: np.ndarray) -> tuple[Tensor, Tensor]:
        x = torch.from_numpy(obs).to(self.dtype)
        if not self.fold:
            x = x / SCALE
        if self.fmt is torch.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for w, b, stride in self.convs:
            x = self.relu(F.conv2d(x, w, b, stride))
        # flatten in (C, H, W) order whatever the memory layout: reshape copies if needed
        h = self.relu(torch.addmm(self.fc[1], x.flatten(1), self.fc[0]))
        out = torch.addmm(self.heads[1], h, self.heads[0]).float()
        return out[:, :-1], out[:, -1]


def candidates(model: NatureCNN, *, compile_: bool) -> dict[str, tuple[Outputs, str]]:
    """name -> (obs -> (logits, value), grad mode)."""

    def module(obs: np.ndarray) -> tuple[Tensor, Tensor]:
        return model(torch.from_numpy(obs))

    shipped = model.inference()
    out: dict[str, tuple[Outputs, str]] = {
        "nn.Module, no_grad": (module, "no_grad"),
        "nn.Module, inference_mode": (module, "inference_mode"),
        "functional NCHW, no_grad": (Functional(model), "no_grad"),
        "functional NCHW, inference_mode": (Functional(model), "inference_mode"),
        "functional channels_last, inference_mode": (
            Functional(model, channels_last=True),
            "inference_mode",
        ),
        "functional NCHW, 1/255 folded into conv.0 weights": (
            Functional(model, fold_scale=True),
            "inference_mode",
        ),
        "functional NCHW, in-place ReLU": (Functional(model, inplace=True), "inference_mode"),
        "functional NCHW, in-place ReLU, 1/255 folded": (
            Functional(model, inplace=True, fold_scale=True),
            "inference_mode",
        ),
        "bfloat16 (AMX) NCHW, inference_mode": (
            Functional(model, dtype=torch.bfloat16),
            "inference_mode",
        ),
        "CNNInference (as shipped)": (shipped._outputs, "inference_mode"),
    }
    with torch.no_grad():
        example = torch.zeros(8, *SPEC["obs_shape"], dtype=torch.uint8)
        traced = torch.jit.freeze(torch.jit.trace(_Plain(model).eval(), example))

    def jit(obs: np.ndarray) -> tuple[Tensor, Tensor]:
        return traced(torch.from_numpy(obs))

    out["torch.jit.trace + freeze, no_grad"] = (jit, "no_grad")
    if compile_:
        compiled = torch.compile(_Plain(model).eval(), dynamic=False)

        def comp(obs: np.ndarray) -> tuple[Tensor, Tensor]:
            return compiled(torch.from_numpy(obs))

        out["torch.compile, no_grad"] = (comp, "no_grad")
    return out


class _Plain(torch.nn.Module):
    """(logits, value) of a categorical NatureCNN, for tracing and compiling."""

    def __init__(self, model: NatureCNN) -> None:
        super().__init__()
        self.model = model

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        return self.model(obs)


def act_fn(model: NatureCNN, outputs: Outputs, mode: str) -> Callable[[np.ndarray], Any]:
    """What the actor calls: outputs, then the distribution's sampling, then numpy."""
    ctx = torch.inference_mode if mode == "inference_mode" else torch.no_grad

    def act(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with ctx():
            logits, value = outputs(obs)
            action, logp = model.dist.sample(logits)
            return action.numpy(), logp.numpy(), value.numpy()

    return act


def max_error(model: NatureCNN, outputs: Outputs, mode: str) -> float:
    obs = np.random.default_rng(1).integers(0, 256, (16, *SPEC["obs_shape"]), dtype=np.uint8)
    with torch.no_grad():
        ref_logits, ref_value = model(torch.from_numpy(obs))
        ctx = torch.inference_mode if mode == "inference_mode" else torch.no_grad
        with ctx():
            logits, value = outputs(obs)
        return max(
            float((logits.float() - ref_logits).abs().max()),
            float((value.float() - ref_value).abs().max()),
        )


def burst_ms(act: Callable[[np.ndarray], Any], batch: np.ndarray, calls: int) -> float:
    """The median milliseconds of `calls` back-to-back calls."""
    times = []
    for _ in range(calls):
        s = time.perf_counter_ns()
        act(batch)
        times.append((time.perf_counter_ns() - s) / 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds of short bursts (a smoke run)")
    ap.add_argument("--compile", action="store_true", help="also torch.compile (minutes to build)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(ap)
    args = ap.parse_args(argv)
    bench_run = harness.Run("cnn_forward", argv)
    rounds, burst = (3, 5) if args.quick else (args.rounds, 25)
    with harness.BenchLock(args.lock):
        doc = measure(args, rounds, burst, harness.command_line("cnn_forward", argv))
    if args.quick:
        print(json.dumps(doc, indent=2))
        return
    print(harness.write_results(args.out, "cnn_forward", doc, _markdown(doc), bench_run))


def measure(args: argparse.Namespace, rounds: int, burst: int, command: str) -> dict[str, Any]:
    """Every path's figures at every batch size, and what they were measured on."""
    torch.set_num_threads(1)  # as services/actor does
    torch.manual_seed(0)
    model = build_model(SPEC)
    with torch.no_grad():  # trained-looking heads: logits far from zero
        model.pi.weight.mul_(100.0)
    load_before = harness.load1()
    t0 = time.perf_counter()
    paths = candidates(model, compile_=args.compile)
    errors = {name: max_error(model, fn, mode) for name, (fn, mode) in paths.items()}
    acts = {name: act_fn(model, fn, mode) for name, (fn, mode) in paths.items()}
    rng = np.random.default_rng(0)
    obs = {n: rng.integers(0, 256, (n, *SPEC["obs_shape"]), dtype=np.uint8) for n in SIZES}
    for act in acts.values():  # warm up every path and size (allocator, JIT profiling)
        for n in SIZES:
            for _ in range(3):
                act(obs[n])
    setup_s = time.perf_counter() - t0

    times = harness.interleave(
        [(p, n) for p in acts for n in SIZES], rounds,
        lambda key, _r: burst_ms(acts[key[0]], obs[key[1]], burst), order="shuffle",
    )  # fmt: skip
    load_after = harness.load1()

    results = []
    for name in acts:
        row: dict[str, Any] = {"path": name, "max_abs_error": errors[name]}
        row["correct"] = errors[name] <= TOLERANCE
        for n in SIZES:
            ms = times[(name, n)]
            row[f"n{n}"] = {
                "median_ms": round(statistics.median(ms), 4),
                "min_ms": round(min(ms), 4),
                "max_ms": round(max(ms), 4),
                "us_per_obs": round(1000 * statistics.median(ms) / n, 1),
            }
        results.append(row)
    correct = [r for r in results if r["correct"]]
    fastest = {
        n: min(correct, key=lambda r: r[f"n{n}"]["median_ms"])["path"] for n in SIZES
    }  # fmt: skip
    return {
        "benchmark": "cnn_forward",
        "command": command,
        "date": harness.utc_now(),
        "machine": harness.machine(
            torch_threads=torch.get_num_threads(),
            loadavg_1m_before=load_before,
            loadavg_1m_after=load_after,
        ),
        "spec": SPEC,
        "rounds": rounds,
        "calls_per_burst": burst,
        "setup_s": round(setup_s, 1),
        "tolerance": TOLERANCE,
        "fastest_correct": {str(n): p for n, p in fastest.items()},
        "results": results,
    }


def _markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        "# Nature CNN forward at the actor's batch sizes",
        "",
        f"`{doc['command']}` on {harness.machine_line(m)}, {m['torch_threads']} torch thread; "
        f"{doc['date']}; 1-minute load average {m['loadavg_1m_before']} before, "
        f"{m['loadavg_1m_after']} after (the CPUs are shared with other work).",
        "",
        "One call = the actor's `act(obs)`: uint8 [N, 4, 84, 84] numpy in, the forward pass "
        "(4→32 8×8/4, 32→64 4×4/2, 64→64 3×3/1, 3136→512, heads 6 + 1), categorical "
        "sampling, numpy out. Median over "
        f"{doc['rounds']} interleaved rounds of the median of {doc['calls_per_burst']} calls "
        "(min–max over rounds). Error = max |logits, value − nn.Module float32 forward|; a "
        f"path is correct at ≤ {doc['tolerance']:g}.",
        "",
        "| path | error | correct | N=1 ms | N=8 ms | N=16 ms | µs/obs at N=8 |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in doc["results"]:
        cells = [
            f"{r[f'n{n}']['median_ms']:.3f} ({r[f'n{n}']['min_ms']:.2f}–{r[f'n{n}']['max_ms']:.2f})"
            for n in SIZES
        ]
        lines.append(
            f"| {r['path']} | {r['max_abs_error']:.1e} | {'yes' if r['correct'] else 'no'} | "
            + " | ".join(cells)
            + f" | {r['n8']['us_per_obs']:.0f} |"
        )
    fastest = ", ".join(f"N={n}: {p}" for n, p in doc["fastest_correct"].items())
    by_path = {r["path"]: r for r in doc["results"]}
    base, shipped = by_path["nn.Module, no_grad"], by_path["CNNInference (as shipped)"]
    ratios = ", ".join(
        f"N={n}: {base[f'n{n}']['median_ms'] / shipped[f'n{n}']['median_ms']:.2f}x" for n in SIZES
    )
    lines += [
        "",
        f"Fastest correct path: {fastest}.",
        "",
        "Shipped (`ppomq.core.models.cnn.CNNInference`): functional NCHW float32 under "
        "inference_mode, ReLU in place, fc weight pre-transposed for `addmm`, 1/255 folded "
        "into conv.0's weights, the two heads one matmul; against `nn.Module, no_grad`: "
        f"{ratios}. Paths within a few per cent of it are within this machine's noise; "
        "bfloat16 is faster at N ≥ 8 but its outputs are not the learner's float32 policy "
        "(the error column), so the actor's log-probabilities would not be the ones PPO's "
        "ratio assumes.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
