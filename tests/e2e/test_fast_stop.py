"""A run that ends at its target stops within moments of its last update: the
actors and the weightserver hear the end and exit by themselves, the fork server and Redis
are stopped. Nothing of the run may be lost on the way: checkpoint, final weights, summary,
episodes, learning curve, and every service stops by itself or through its own warm stop
rather than being killed."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import torch
from PIL import Image

from ppomq.core.timeline import read_timeline
from ppomq.learner.checkpoint import read_checkpoint

pytestmark = pytest.mark.slow


def test_a_run_stopping_at_its_target_leaves_every_file_and_a_full_timeline(tmp_path):
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    out = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "train", "--actors", "2",
         "--target-return", "40", "--total-steps", "50000", "--eval-episodes", "0",
         "--num-envs", "4", "--num-steps", "32", "--update-epochs", "4",
         "--run-dir", str(run_dir), "--no-progress"],
        capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["solved_at_env_steps"] is not None  # stopped by the target
    with open(run_dir / "episodes.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == summary["episodes"] > 0
    ckpt = read_checkpoint(run_dir / "checkpoints" / "ckpt.pt").state
    assert ckpt["version"] == summary["versions"]
    final = torch.load(run_dir / "final_weights.pt", weights_only=False)
    assert final["metadata"]["version"] == summary["versions"]
    with Image.open(run_dir / "learning_curve.png") as png:
        png.verify()  # a whole, readable PNG, not a truncated one
    assert "run finished" in (run_dir / "logs" / "learner.log").read_text()

    # Every child ended by itself, none by the launcher's kill: the actors on hearing from
    # the weightserver that the run finished, the weightserver once they had all heard.
    for name in ("actor-0", "actor-1"):
        assert "run 'default' finished: actor" in (run_dir / "logs" / f"{name}.log").read_text()
    assert "stopped" in (run_dir / "logs" / "weightserver.log").read_text()

    # The launcher's timeline has every phase, in order (no durations asserted).
    t = read_timeline(run_dir)
    assert t is not None
    order = ["command start", "launcher start", "redis ready", "zygote ready",
             "first env step", "last update", "learner exited", "children exited",
             "zygote stopped", "redis stopped", "exit"]  # fmt: skip
    assert [t[k] for k in order] == sorted(t[k] for k in order), t
    # (An actor may step before the launcher, descheduled, marks its last fork.)
    assert t["zygote ready"] <= t["children forked"] <= t["children exited"], t
    for name in ("weightserver", "actor-0", "actor-1"):
        assert f"{name} exited" in t
    # The curve is the launcher's to draw, once the learner has exited: the learner's end
    # (and everyone waiting on it) no longer includes matplotlib's import.
    assert t["learner exited"] <= t["learning curve drawn"] <= t["exit"], t
    learner_settings = json.loads((run_dir / "learner_settings.json").read_text())
    assert learner_settings["learning_curve"] is False
    assert t["overhead_s"] == pytest.approx(t["startup_s"] + t["shutdown_s"], abs=0.002)
