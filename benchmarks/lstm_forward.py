"""The recurrent policy's step at the actor's batch sizes: which inference path is fastest.

    .venv/bin/python -m benchmarks.lstm_forward [--quick] [--rounds 9]

What an actor does per env step with `--arch lstm`: `act(obs, starts, state)` on N envs (numpy
in; action, logp, value and the next state out as numpy, sampling included), with one torch
thread (services/actor sets torch.set_num_threads(1)), for the masked CartPole's network
(ppomq/MaskedCartPole-v1: 2 inputs, a 64-unit tanh layer, an LSTM of 64, 2 actions) and,
for scale, the MLP actor's step on the same observations (64-64 tanh, ppomq's default).
Paths:

- module: LSTMActorCritic.forward_sequence over one step (nn.Linear, nn.LSTM modules);
- functional: the same arithmetic as plain calls on copies of the weights (addmm for the
  encoder, torch.lstm_cell, one addmm for both heads);
- mlp: the MLP actor's MLPInference.act (no state), the figure the LSTM adds to.

A round times every (path, N) once, in a fresh random order, as the median of a burst of
calls; the figure is the median over rounds. Every LSTM path is checked against the module
(logits, value and next state): a path is a candidate only if it agrees to 1e-5.
Results go to benchmarks/results/lstm_forward.{json,md}.
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

from benchmarks import harness
from ppomq.core.models import build_model
from ppomq.core.models.lstm import LSTMActorCritic, LSTMFunctional

SPEC = {"arch": "lstm", "encoder": "mlp", "obs_shape": [2],
        "action": {"kind": "categorical", "n": 2}, "hidden": [64], "activation": "tanh",
        "obs_norm": None, "lstm_size": 64}  # fmt: skip
MLP_SPEC = {"arch": "mlp", "obs_shape": [2], "action": {"kind": "categorical", "n": 2},
            "hidden": [64, 64], "activation": "tanh", "obs_norm": None}  # fmt: skip
SIZES = (1, 8, 16)
TOLERANCE = 1e-5

Step = Callable[[np.ndarray, np.ndarray, np.ndarray], Any]


def module_outputs(model: LSTMActorCritic, obs, starts, state):
    """(logits, value, next state [N, 2, L]) of the module, the reference."""
    head, value, nxt = model.forward_sequence(
        model.preprocess(torch.from_numpy(obs))[None],
        torch.from_numpy(starts)[None],
        model.state_from_wire(state),
    )
    return head[0], value[0], torch.stack(nxt, dim=1)


def paths(model: LSTMActorCritic) -> dict[str, Step]:
    functional = LSTMFunctional(model)
    mlp = build_model(MLP_SPEC).inference()

    def module_act(obs, starts, state):
        with torch.inference_mode():
            logits, value, nxt = module_outputs(model, obs, starts, state)
            action, logp = model.dist.sample(logits)
            return action.numpy(), logp.numpy(), value.numpy(), nxt.numpy()

    def functional_act(obs, starts, state):
        with torch.inference_mode():
            logits, value, nxt = functional.outputs(obs, starts, state)
            action, logp = model.dist.sample(logits)
            return action.numpy(), logp.numpy(), value.numpy(), nxt.numpy()

    return {
        "module": module_act,
        "functional": functional_act,
        "mlp": lambda obs, starts, state: mlp.act(obs),
    }


def max_error(model: LSTMActorCritic) -> float:
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(16, 2)).astype(np.float32)
    starts = rng.random(16) < 0.3
    state = rng.normal(size=(16, 2, 64)).astype(np.float32)
    with torch.inference_mode():
        ref = module_outputs(model, obs, starts, state)
        got = LSTMFunctional(model).outputs(obs, starts, state)
        return max(float((a - b).abs().max()) for a, b in zip(ref, got, strict=True))


def burst_us(step: Step, inputs: tuple[np.ndarray, ...], calls: int) -> float:
    """The median microseconds of `calls` back-to-back calls."""
    times = []
    for _ in range(calls):
        s = time.perf_counter_ns()
        step(*inputs)
        times.append((time.perf_counter_ns() - s) / 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds of short bursts (a smoke run)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(ap)
    args = ap.parse_args(argv)
    bench_run = harness.Run("lstm_forward", argv)
    rounds, burst = (3, 5) if args.quick else (args.rounds, 200)
    with harness.BenchLock(args.lock):
        doc = measure(rounds, burst, harness.command_line("lstm_forward", argv))
    if args.quick:
        print(json.dumps(doc, indent=2))
        return
    print(harness.write_results(args.out, "lstm_forward", doc, _markdown(doc), bench_run))


def measure(rounds: int, burst: int, command: str) -> dict[str, Any]:
    """Every path's figures at every batch size, and what they were measured on."""
    torch.set_num_threads(1)  # as services/actor does
    torch.manual_seed(0)
    model = build_model(SPEC).eval()
    load_before = harness.load1()
    steps = paths(model)
    error = max_error(model)
    rng = np.random.default_rng(0)
    inputs = {
        n: (
            rng.normal(size=(n, 2)).astype(np.float32),
            np.zeros(n, dtype=bool),
            rng.normal(size=(n, 2, 64)).astype(np.float32),
        )
        for n in SIZES
    }
    for step in steps.values():  # warm up every path and size
        for n in SIZES:
            for _ in range(5):
                step(*inputs[n])
    times = harness.interleave(
        [(p, n) for p in steps for n in SIZES], rounds,
        lambda key, _r: burst_us(steps[key[0]], inputs[key[1]], burst), order="shuffle",
    )  # fmt: skip
    load_after = harness.load1()

    results = []
    for name in steps:
        row: dict[str, Any] = {"path": name}
        for n in SIZES:
            us = times[(name, n)]
            row[f"n{n}"] = {
                "median_us": round(statistics.median(us), 1),
                "min_us": round(min(us), 1),
                "max_us": round(max(us), 1),
            }
        results.append(row)
    return {
        "benchmark": "lstm_forward",
        "command": command,
        "date": harness.utc_now(),
        "machine": harness.machine(
            torch_threads=torch.get_num_threads(),
            loadavg_1m_before=load_before,
            loadavg_1m_after=load_after,
        ),
        "spec": SPEC,
        "mlp_spec": MLP_SPEC,
        "rounds": rounds,
        "calls_per_burst": burst,
        "functional_max_abs_error": error,
        "functional_correct": error <= TOLERANCE,
        "results": results,
    }


def _markdown(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    by = {r["path"]: r for r in doc["results"]}
    lines = [
        "# The recurrent policy's actor step",
        "",
        f"`{doc['command']}`, {doc['date']}, {m['cpus']} CPUs, torch {m['torch']}, "
        f"{m['torch_threads']} thread; 1-min load {m['loadavg_1m_before']} before, "
        f"{m['loadavg_1m_after']} after. Median over {doc['rounds']} interleaved rounds of the "
        f"median of {doc['calls_per_burst']} calls: one `act` (sampling and numpy included) "
        "for N envs, in µs. The functional path agrees with the module to "
        f"{doc['functional_max_abs_error']:.1e} (logits, value, next state).",
        "",
        "| N | module (µs) | functional (µs) | module / functional | MLP actor (µs) | "
        "functional LSTM / MLP |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in SIZES:
        mod, fun, mlp = (by[p][f"n{n}"]["median_us"] for p in ("module", "functional", "mlp"))
        lines.append(
            f"| {n} | {mod:,.1f} | {fun:,.1f} | {mod / fun:.2f}× | {mlp:,.1f} | {fun / mlp:.2f}× |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
