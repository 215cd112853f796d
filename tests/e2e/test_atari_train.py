"""Atari through the same services: `ppomq train --env-id ALE/Pong-v5` as a user runs it —
the Atari pipeline in the actors, uint8 frame stacks on the wire, the Nature CNN in the
learner and in the published weights."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from .cli import PPOMQ
from .cli import clean_env as _env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_pong_trains_through_the_services_with_the_nature_cnn(tmp_path):
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [*PPOMQ, "train", "--env-id", "ALE/Pong-v5", "--actors", "1", "--num-envs", "2",
         "--num-steps", "32", "--total-steps", "512", "--minibatch-size", "64",
         "--update-epochs", "1", "--eval-episodes", "0", "--run-dir", str(run_dir),
         "--no-progress"],
        capture_output=True, text=True, timeout=240, env=_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    # The emulator's banner does not come before ppomq's own first line, which names the
    # preset picked from the env's spaces (no --preset given) and why.
    first = out.stdout.splitlines()[0]
    assert first.startswith(
        "ppomq train: ALE/Pong-v5, preset atari, picked for its uint8 image observations"
    ), out.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] == 512 and summary["batches_accepted"] == 8
    final = torch.load(run_dir / "final_weights.pt", weights_only=True)
    model = final["metadata"]["model"]
    assert model["arch"] == "nature-cnn" and model["obs_shape"] == [4, 84, 84]
    assert final["state_dict"]["conv.0.weight"].shape == (32, 4, 8, 8)
