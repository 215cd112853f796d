"""TensorBoard is installed where the run dir's `tb/` is meant to be read with it: the
`tensorboard` command of the environment `make train` sets up, reading ppomq's own events."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The console scripts of the environment running the tests (.venv/bin under `make test`).
BIN = Path(sys.executable).parent


def _pins() -> dict[str, str]:
    """The tensorboard pin of each place that installs it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    pins = {
        name: spec.split("==", 1)[1]
        for name in ("local", "dev")
        for spec in extras[name]
        if spec.startswith("tensorboard==")
    }
    image = re.search(r"pip install [^\n]*tensorboard==([\w.]+)", (ROOT / "Dockerfile").read_text())
    if image:
        pins["Dockerfile"] = image.group(1)
    return pins


def test_local_and_dev_extras_pin_the_tensorboard_of_the_viewer_image():
    pins = _pins()
    assert {"local", "dev", "Dockerfile"} <= pins.keys(), pins
    assert len(set(pins.values())) == 1, pins


def test_tensorboard_command_runs_from_the_environments_bin():
    exe = BIN / "tensorboard"
    assert exe.exists(), f"no {exe}: pip install -e '.[dev]' (or '.[local]') installs it"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == _pins()["dev"]


def test_tensorboard_reads_the_events_a_run_writes(tmp_path):
    from ppomq.core.rundir import RunRecorder

    recorder = RunRecorder(tmp_path, solve_threshold=None)
    recorder.add_update({"charts/SPS": 1234.0, "losses/approx_kl": 0.01}, env_steps=256)
    recorder.close()
    out = subprocess.run(
        [str(BIN / "tensorboard"), "--inspect", "--logdir", str(tmp_path / "tb")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "charts/SPS" in out.stdout and "losses/approx_kl" in out.stdout, out.stdout


def test_every_episode_reaches_tensorboard_in_one_event_per_batch(tmp_path):
    """A batch of short episodes holds thousands: one event per episode scalar made the
    learner spend about 0.3 ms an episode in tensorboardX's queue (benchmarks/puffer_tax.py)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from ppomq.core.rundir import RunRecorder

    recorder = RunRecorder(tmp_path, solve_threshold=None)
    batches = [([float(i) for i in range(k, k + 500)], list(range(1, 501))) for k in (0, 1000)]
    for step, (returns, lengths) in zip((256, 512), batches, strict=True):
        recorder.add_episodes(returns, lengths, env_steps=step, wall_s=1.0)
    recorder.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    returns = [(e.step, e.value) for e in acc.Scalars("charts/episodic_return")]
    lengths = [(e.step, e.value) for e in acc.Scalars("charts/episodic_length")]
    steps = (256, 512)
    assert sorted(returns) == [(s, r) for s, b in zip(steps, batches, strict=True) for r in b[0]]
    assert sorted(lengths) == [(s, float(n)) for s in steps for n in range(1, 501)]
    events = [
        ev
        for path in sorted((tmp_path / "tb").iterdir())
        for ev in EventFileLoader(str(path)).Load()
        if ev.HasField("summary")
    ]
    assert len(events) == 2  # one per add_episodes call, both tags in it
