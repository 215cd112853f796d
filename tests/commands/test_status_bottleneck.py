"""`ppomq status` names the side that binds a real run: a learner starved by one slow actor
(it waits for rollouts; more actors pay), and one saturated by fast actors and a big update
(they wait for its weights; more actors will not help)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.envs import SLEEP_ENV_SPEC, STEP_S_VAR

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
PPOMQ = [sys.executable, "-m", "ppomq.cli"]
QUIET = ["--eval-episodes", "0", "--no-progress", "--num-envs", "4", "--num-steps", "32"]


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}, **extra}


def _ppomq(args: list[str], env: dict[str, str], timeout: float) -> str:
    out = subprocess.run(
        [*PPOMQ, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _train_then_status(run_dir: Path, args: list[str], env: dict[str, str]) -> tuple[str, dict]:
    """`ppomq train`, then `ppomq status` of its run dir: the text, and the --json."""
    _ppomq(["train", *QUIET, "--run-dir", str(run_dir), *args], env, 240)
    said = _ppomq(["status", "--run-dir", str(run_dir)], env, 60)
    return said, json.loads(_ppomq(["status", "--run-dir", str(run_dir), "--json"], env, 60))


def test_a_learner_starved_by_one_slow_actor_is_said_to_want_more_actors(tmp_path):
    # 4 envs x 32 steps of 10 ms each: over a second per batch, for a 128-sample update
    # the learner trains in a few milliseconds.
    out, status = _train_then_status(
        tmp_path / "run",
        ["--env-id", SLEEP_ENV_SPEC, "--actors", "1", "--total-steps", "1280",
         "--update-epochs", "1"],
        _env(**{STEP_S_VAR: "0.01"}),
    )  # fmt: skip
    assert status["bottleneck"]["side"] == "actors", out
    assert "actor-bound: the learner waits" in out and "more actor replicas pay" in out, out


def test_a_learner_saturated_by_fast_actors_says_more_actors_will_not_help(tmp_path):
    # 3 CartPole actors sample 128 steps in milliseconds; each update of their 384 samples
    # is 100 epochs of 12 minibatches: the actors wait for its weights.
    out, status = _train_then_status(
        tmp_path / "run",
        ["--env-id", "CartPole-v1", "--actors", "3", "--total-steps", "3840",
         "--update-epochs", "100", "--minibatch-size", "32"],
        _env(),
    )  # fmt: skip
    assert status["bottleneck"]["side"] == "learner", out
    assert "learner-bound: actors wait" in out and "will not help" in out, out
