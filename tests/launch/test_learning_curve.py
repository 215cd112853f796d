"""`ppomq train` draws the learning curve itself, once its learner has written the run's
summary: the same PNG, with the summary's threshold, and none for a run whose learner
wrote no summary (or one without episodes) this time."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from PIL import Image

from ppomq.core.rundir import RunRecorder
from ppomq.launch.learning_curve import CurvePainter


def _run_dir(tmp_path: Path, *, episodes: int) -> Path:
    rec = RunRecorder(tmp_path, solve_threshold=475.0)
    rec.add_episodes([10.0 * (i + 1) for i in range(episodes)], [10] * episodes,
                     env_steps=1024, wall_s=1.0)  # fmt: skip
    rec.close()
    (tmp_path / "summary.json").write_text(
        json.dumps({"episodes": episodes, "solve_threshold": 475.0})
    )
    return tmp_path


def test_the_curve_is_drawn_from_this_runs_summary_and_episodes(tmp_path):
    since = time.time() - 1
    run_dir = _run_dir(tmp_path, episodes=3)
    painter = CurvePainter().start()
    assert painter.draw_for(run_dir, since)
    drawn = painter.finish(time.monotonic() + 60)
    assert drawn == run_dir / "learning_curve.png"
    with Image.open(drawn) as png:
        png.load()  # whole and decodable
        assert png.format == "PNG" and png.size == (700, 400)


def test_no_curve_without_a_summary_of_this_launch_or_without_episodes(tmp_path):
    old = _run_dir(tmp_path / "old", episodes=3)
    os.utime(old / "summary.json", (1.0, 1.0))  # an earlier run's summary
    empty = _run_dir(tmp_path / "empty", episodes=0)
    since = time.time() - 60
    painter = CurvePainter().start()
    assert not painter.draw_for(old, since)
    assert not painter.draw_for(empty, since)
    assert not painter.draw_for(tmp_path / "none", since)
    assert painter.finish(time.monotonic() + 60) is None
    assert not any(tmp_path.rglob("learning_curve.png"))
