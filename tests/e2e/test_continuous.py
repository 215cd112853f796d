"""Continuous control learns, end to end: `ppomq train` on Pendulum-v1 with real processes
(Gaussian policy, observation and reward normalization), so it never silently breaks."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from ppomq.core.evaluate import load_weights_file

from .cli import PPOMQ, clean_env

pytestmark = pytest.mark.slow

# rl-baselines3-zoo's Pendulum-v1 PPO settings, less gSDE (γ 0.9, λ 0.95, 10 epochs, lr 1e-3,
# 4 envs), in minibatches of 64; a random policy scores about -1200 to -1400. Most seeds
# reach a mean of -400 over 20 episodes in 40-60k env steps, but a few sit on a plateau near
# -650 first (of 92 runs, one solved at 200k and one at 260k), and the order of two actors'
# batches differs from run to run: the step budget is far past that, since the run ends at
# the target anyway. Ten greedy episodes, not five: one episode that fails to swing up moved
# a five-episode mean of a solved policy to -609.
PENDULUM = [
    "--env-id", "Pendulum-v1", "--norm-obs", "--norm-reward", "--gamma", "0.9",
    "--gae-lambda", "0.95", "--learning-rate", "1e-3", "--num-envs", "4", "--num-steps", "256",
    "--update-epochs", "10", "--minibatch-size", "64", "--eval-episodes", "10", "--no-progress",
]  # fmt: skip


def test_pendulum_learns_with_a_gaussian_policy_and_normalization(tmp_path):
    run_dir = tmp_path / "pendulum"
    proc = subprocess.run(
        [*PPOMQ, "train", *PENDULUM, "--total-steps", "600000", "--target-return", "-400",
         "--seed", "3", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=300, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["solved_at_env_steps"] is not None, summary
    assert summary["final_eval_return"] > -600, summary
    # The exported policy carries its normalization statistics: moved off their start.
    policy, meta = load_weights_file(run_dir / "final_weights.pt")
    assert meta["model"]["action"] == {"kind": "gaussian", "shape": [1]}
    assert float(policy.obs_norm.count) > 10_000
    assert not torch.allclose(policy.obs_norm.var, torch.ones(3, dtype=torch.float64))


def test_the_mujoco_preset_trains_a_mujoco_task(tmp_path):
    """The preset as a user starts it, shortened: a real MuJoCo env, per-element bounds,
    6 action dims, normalization on; two updates and a greedy eval."""
    run_dir = tmp_path / "hopper"
    proc = subprocess.run(
        [*PPOMQ, "train", "--preset", "mujoco", "--env-id", "Hopper-v5", "--num-steps", "512",
         "--total-steps", "2048", "--eval-episodes", "1", "--no-progress",
         "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=300, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_id"] == "Hopper-v5" and summary["versions"] >= 2, summary
    settings = json.loads((run_dir / "settings.json").read_text())
    assert (settings["norm_obs"], settings["norm_reward"], settings["minibatch_size"]) == (
        True, True, 64,
    )  # fmt: skip
    _, meta = load_weights_file(run_dir / "final_weights.pt")
    assert meta["model"]["action"] == {"kind": "gaussian", "shape": [3]}
