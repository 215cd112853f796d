"""End to end: a recurrent policy (`--arch lstm`) trained by `ppomq train` on the masked
CartPole, through the real services: actors carry each env's state and send it with every
batch, the learner trains on whole sequences, and eval replays the policy with its state."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from ppomq.core.events import EVENTS_FILE, read_events

from .cli import PPOMQ, SMALL
from .cli import clean_env as _env

pytestmark = pytest.mark.slow

LSTM = ["--env-id", "ppomq/MaskedCartPole-v1", "--arch", "lstm", "--lstm-size", "16",
        "--hidden-sizes", "16", "--actors", "2", "--total-steps", "3000"]  # fmt: skip


@pytest.mark.parametrize("targets", ["gae", "vtrace"])
def test_an_lstm_policy_trains_through_the_services_and_evaluates(tmp_path, targets):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [*PPOMQ, "train", *LSTM, "--targets", targets, "--run-dir", str(run_dir), *SMALL],
        capture_output=True, text=True, timeout=300, env=_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= 3000 and summary["versions"] >= 5
    # Every batch carried its hidden_state (the learner's spec requires it): none refused
    # as malformed (async may still refuse a stale one).
    assert set(summary["batches_rejected"]) <= {"stale"}, summary["batches_rejected"]
    assert summary["batches_accepted"] >= 5
    # Each actor says where its time went (its actor.stop event), having stepped the
    # recurrent policy.
    stops = {
        e["source"]: e for e in read_events(run_dir / EVENTS_FILE) if e["event"] == "actor.stop"
    }
    assert set(stops) == {"actor-0", "actor-1"}
    for stop in stops.values():
        assert set(stop["seconds"]) == {"sample", "weights", "send"}
        assert stop["seconds"]["sample"] > 0 and stop["batches"] >= 1
    weights = torch.load(run_dir / "final_weights.pt", weights_only=True)
    model = weights["metadata"]["model"]
    assert model["arch"] == "lstm" and model["encoder"] == "mlp" and model["lstm_size"] == 16
    ev = subprocess.run(
        [*PPOMQ, "eval", "--run-dir", str(run_dir), "--episodes", "2", "--seed", "10001",
         "--json"],
        capture_output=True, text=True, timeout=120, env=_env(),
    )  # fmt: skip
    assert ev.returncode == 0, ev.stderr
    # The greedy return equals the learner's own final evaluation of the same weights on
    # the same episodes (seed: the run's, 1, plus 10,000), each replayed from a zero state.
    assert json.loads(ev.stdout)["mean_return"] == summary["final_eval_return"]
