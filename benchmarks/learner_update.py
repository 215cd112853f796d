"""The learner's PPO update: time per SGD step and per update, by gradient engine.

    .venv/bin/python -m benchmarks.learner_update [--rounds 7] [--updates 20] [--quick]

One process, one torch thread (as the learner runs), on rollout batches made by the policy
itself. Cases: CartPole-v1 shapes and the cartpole preset (64-64 tanh, 20 epochs,
256-sample minibatches) with one actor's batch (N=8 x T=32: 256 samples, 1 minibatch per
epoch) and two actors' (512 samples, 2 minibatches); and HalfCheetah-v5 shapes (17 obs, 6
Gaussian actions, observation normalization) with the mujoco preset's update: two actors'
T=1024 x N=1 batches, 10 epochs of 64-sample minibatches (320 SGD steps).

Engines, interleaved round by round so that all see the same machine:
  torch-optim  what ppomq did before (and CleanRL does): autograd, clip_grad_norm_ over the
               parameter list, torch.optim.Adam(fused=True) — the baseline of the ratios
  autograd     `--gradients autograd`: autograd into flat gradients, flat clip, FlatAdam
  analytic     `--gradients analytic` (what `auto` picks for MLPs): the MLP backward by
               hand, the distribution and objective by autograd, flat clip, FlatAdam

Writes benchmarks/results/learner_update.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import harness
from ppomq.core.models import Policy, build_model
from ppomq.learner.ppo_loss import ppo_loss
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from ppomq.proto import RolloutBatch

CARTPOLE = {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
            "hidden": [64, 64], "activation": "tanh", "obs_norm": None}  # fmt: skip
CHEETAH = {"arch": "mlp", "obs_shape": [17], "action": {"kind": "gaussian", "shape": [6]},
           "hidden": [64, 64], "activation": "tanh",
           "obs_norm": {"clip": 10.0, "epsilon": 1e-8}}  # fmt: skip
# (name, model spec, batches, T, N, PPOConfig overrides)
CASES: list[tuple[str, dict[str, Any], int, int, int, dict[str, Any]]] = [
    ("cartpole, 1 batch", CARTPOLE, 1, 32, 8, {}),
    ("cartpole, 2 batches", CARTPOLE, 2, 32, 8, {}),
    ("halfcheetah, 2 batches", CHEETAH, 2, 1024, 1,
     {"update_epochs": 10, "minibatch_size": 64, "clip_vloss": True}),
]  # fmt: skip
# The atari preset's update: 2 actors x 4 envs x 128 steps, 4 epochs of 256 (CleanRL's).
ATARI = {"arch": "nature-cnn", "obs_shape": [4, 84, 84], "action": {"kind": "categorical", "n": 4}}
ATARI_CASE = (
    "atari preset (nature-cnn), 2 batches", ATARI, 2, 128, 4,
    {"update_epochs": 4, "minibatch_size": 256, "clip_coef": 0.1, "ent_coef": 0.01},
)  # fmt: skip
ENGINES = ("torch-optim", "autograd", "analytic")
BASELINE = "torch-optim"


def make_batch(policy: Policy, seed: int, t: int = 32, n: int = 8) -> RolloutBatch:
    rng = np.random.default_rng(seed)
    obs_shape = tuple(policy.spec["obs_shape"])
    if policy.spec["arch"] == "nature-cnn":  # frames: uint8, as the wire carries them
        obs = rng.integers(0, 256, size=(t, n, *obs_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(t, n, *obs_shape)).astype(np.float32)
    with torch.no_grad():
        action, logp, value = policy.act(torch.from_numpy(obs.reshape(-1, *obs_shape)))
    return RolloutBatch(
        run_id="bench", actor_id="a", seq=seed, policy_version=0, env_id="CartPole-v1",
        num_envs=n, num_steps=t,
        arrays={
            "obs": obs, "actions": action.numpy().reshape(t, n, *action.shape[1:]),
            "logp": logp.numpy().reshape(t, n), "values": value.numpy().reshape(t, n),
            "rewards": np.ones((t, n), np.float32),
            "terminated": rng.random((t, n)) < 0.02, "truncated": np.zeros((t, n), bool),
            "final_values": np.zeros((t, n), np.float32),
            "bootstrap_value": np.zeros(n, np.float32),
        },
    )  # fmt: skip


class TorchOptimTrainer(PPOTrainer):
    """The previous ppomq update loop, kept here as the baseline."""

    def __init__(self, *, policy: Policy, config: PPOConfig) -> None:
        self.policy, self.config, self.updates = policy, config, 0
        self.adam = torch.optim.Adam(
            policy.parameters(), lr=config.learning_rate, eps=1e-5, fused=True
        )

    def update(self, batches: list[RolloutBatch], env_steps: int) -> dict[str, float]:
        from ppomq.learner.trainer import flatten_batches

        cfg = self.config
        flat = flatten_batches(batches, gamma=cfg.gamma, lam=cfg.gae_lambda)
        t = {k: torch.from_numpy(v) for k, v in flat.items()}
        t["obs"] = self.policy.preprocess(t["obs"])
        size = len(t["obs"])
        n_mb = max(1, round(size / cfg.minibatch_size))
        if self.policy.obs_norm is not None:
            self.policy.obs_norm.update(t["obs"])
        for _ in range(cfg.update_epochs):
            for mb in torch.tensor_split(torch.randperm(size), n_mb):
                new_logp, entropy, new_values = self.policy.evaluate(t["obs"][mb], t["actions"][mb])
                loss, st = ppo_loss(
                    new_logp, t["logp"][mb], t["advantages"][mb], new_values, t["values"][mb],
                    t["returns"][mb], entropy, clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef,
                    ent_coef=cfg.ent_coef, clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv,
                )  # fmt: skip
                self.adam.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm,
                                               foreach=True)  # fmt: skip
                self.adam.step()
                for value in st:
                    float(value)
        return {}


def make_trainer(engine: str, policy: Policy, overrides: dict[str, Any]) -> PPOTrainer:
    cfg = PPOConfig(anneal_lr=False, **overrides)
    if engine == BASELINE:
        return TorchOptimTrainer(policy=policy, config=cfg)
    return PPOTrainer(policy=policy, config=PPOConfig(anneal_lr=False, gradients=engine,
                                                      **overrides))  # fmt: skip


def time_updates(engine: str, seed: int, *, case: tuple, updates: int, warmup: int = 3) -> float:
    """Median seconds per update over `updates` updates after `warmup` warm-up updates."""
    _, spec, n_batches, t, n, overrides = case
    torch.manual_seed(seed)
    policy = build_model(spec)
    trainer = make_trainer(engine, policy, overrides)
    batches = [make_batch(policy, seed * 100 + i, t, n) for i in range(n_batches)]
    for _ in range(warmup):
        trainer.update(batches, 0)
    times = []
    for _ in range(updates):
        t0 = time.perf_counter()
        trainer.update(batches, 0)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(rounds: int, updates: int, warmup: int = 3) -> dict[str, Any]:
    torch.set_num_threads(1)
    cases: dict[str, Any] = {}
    for spec_case in CASES:
        name, _, n_batches, t, n, overrides = spec_case
        cfg = PPOConfig(**overrides)
        samples = n_batches * t * n
        sgd_steps = cfg.update_epochs * max(1, round(samples / cfg.minibatch_size))
        timed = partial(time_updates, case=spec_case, updates=updates, warmup=warmup)
        per_update = harness.interleave(ENGINES, rounds, timed, order="fixed")
        case = {"name": name, "samples": samples, "sgd_steps_per_update": sgd_steps,
                "engines": {}}  # fmt: skip
        base = statistics.median(per_update[BASELINE])
        for engine, values in per_update.items():
            med = statistics.median(values)
            case["engines"][engine] = {
                "update_ms_median": round(med * 1e3, 2),
                "update_ms_min": round(min(values) * 1e3, 2),
                "update_ms_max": round(max(values) * 1e3, 2),
                "sgd_step_us_median": round(med / sgd_steps * 1e6, 1),
                "speedup_vs_baseline": round(base / med, 2),
            }
        cases[name] = case
    return {
        "benchmark": "learner_update",
        "machine": harness.machine(torch_threads=torch.get_num_threads()),
        "rounds": rounds,
        "updates_per_round": updates,
        "baseline": BASELINE,
        "cases": cases,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Learner update: time per PPO update and per SGD step",
        "",
        f"`{result['command']}` — {harness.machine_line(result['machine'])}, "
        f"{result['machine']['torch_threads']} torch thread; median of "
        f"{result['rounds']} interleaved rounds (each the median of "
        f"{result['updates_per_round']} updates). Ratios against `{result['baseline']}`.",
        "",
        "| update | engine | ms per update (min–max) | us per SGD step | speed-up |",
        "|---|---|---|---|---|",
    ]
    for case in result["cases"].values():
        for engine, e in case["engines"].items():
            lines.append(
                f"| {case['name']}: {case['samples']} samples, "
                f"{case['sgd_steps_per_update']} SGD steps "
                f"| {engine} | {e['update_ms_median']} ({e['update_ms_min']}–"
                f"{e['update_ms_max']}) | {e['sgd_step_us_median']} "
                f"| {e['speedup_vs_baseline']}x |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 2 updates, 1 warm-up (smoke)"
    )
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    harness.add_lock_option(parser)
    args = parser.parse_args(argv)
    bench_run = harness.Run("learner_update", argv)
    rounds, updates = (1, 2) if args.quick else (args.rounds, args.updates)
    with harness.BenchLock(args.lock):
        result = run(rounds, updates, warmup=1 if args.quick else 3)
    result = {
        "command": harness.command_line("learner_update", argv),
        "date": harness.utc_now(),
        **result,
    }
    print(harness.write_results(args.out, "learner_update", result, markdown(result), bench_run))


if __name__ == "__main__":
    main()
