"""Actor replicas added with no other change: the learner grants what it will train on, so
their work is trained on rather than thrown away, under either update-size rule."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support import free_port, wait_until

from .cli import PPOMQ
from .cli import clean_env as _env

# compose's defaults: CartPole, 8 envs x 32 steps, async; its learner is told 2 actors.
ROLLOUT = ["--env-id", "CartPole-v1", "--num-envs", "8", "--num-steps", "32"]
HINT, REPLICAS = 2, 8


def _replica(index: int, rollout: int, weights: int, log) -> subprocess.Popen:
    """`ppomq actor` pointed at the run, as a compose replica is, logging to `log`."""
    return subprocess.Popen(
        [*PPOMQ, "actor", "--run-id", "replicas", *ROLLOUT, "--actor-index", str(index),
         "--learner-addr", f"tcp://127.0.0.1:{rollout}",
         "--weightserver-addr", f"tcp://127.0.0.1:{weights}"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env=_env(),
    )  # fmt: skip


def _run_with_replicas(tmp_path, *learner_flags: str) -> dict:
    """`ppomq train --actors 2` and six more `ppomq actor` replicas pointed at it (as
    `compose up --scale actor=8` does); the run's summary."""
    rollout, weights = free_port(), free_port()
    run_dir = tmp_path / "run"
    logs = [tmp_path / f"actor-{i}.log" for i in range(HINT, REPLICAS)]
    extra = [
        _replica(i, rollout, weights, log)
        for i, log in zip(range(HINT, REPLICAS), logs, strict=True)
    ]
    train = None
    try:
        # The replicas are up and waiting for weights before the run starts: a short run
        # on two loaded cores could otherwise be over before the last one's first batch.
        wait_until(lambda: all(" -> tcp://" in log.read_text() for log in logs), 120,
                   "every replica waiting for weights")  # fmt: skip
        train = subprocess.Popen(
            [*PPOMQ, "train", "--run-id", "replicas", *ROLLOUT, "--actors", str(HINT),
             "--total-steps", "30000", "--eval-episodes", "0", "--no-progress", "--no-curve",
             "--rollout-bind", f"tcp://127.0.0.1:{rollout}",
             "--weightserver-bind", f"tcp://127.0.0.1:{weights}",
             "--run-dir", str(run_dir), *learner_flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
        )  # fmt: skip
        out, _ = train.communicate(timeout=240)
        assert train.returncode == 0, out
        for proc, log in zip(extra, logs, strict=True):  # told the run ended, each exits 0
            assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        for proc in (*extra, *([train] if train else [])):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule", [[], ["--batch-samples", "512"]], ids=["a-batch-per-actor", "fixed-512-samples"]
)
def test_eight_replicas_against_a_hint_of_two_waste_under_five_percent(tmp_path, rule):
    """The learner told 2 actors, 8 running: every replica's batches are trained on (at most
    5 % of the valid batches received are not), with one batch from every live actor per
    update (the default) or with updates of 2 batches whatever the replica count."""
    summary = _run_with_replicas(tmp_path, *rule)
    assert summary["actors"] == REPLICAS  # every replica had batches trained on
    assert summary["waste_ratio"] < 0.05, {
        k: summary[k] for k in ("batches_produced", "batches_accepted", "batches_surplus",
                                "batches_rejected", "waste_ratio")
    }  # fmt: skip
