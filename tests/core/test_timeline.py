"""ppomq.core.timeline (the launcher's phase log) and the learning-curve PNG of a run dir."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

from PIL import Image

from ppomq.core.rundir import RunRecorder, nice_ticks, plot_learning_curve
from ppomq.core.timeline import Timeline, process_start_unix, read_timeline


def test_process_start_is_before_now_and_recent():
    start = process_start_unix()
    assert start is not None
    assert time.time() - 3600 < start <= time.time()


def test_timeline_adds_the_childrens_phases_and_the_overhead(tmp_path: Path):
    (tmp_path / "logs").mkdir()
    t0 = 1000.0
    (tmp_path / "logs" / "actor-0.log").write_text("x\nfirst env step at unix 1002.000000\n")
    (tmp_path / "logs" / "actor-1.log").write_text("first env step at unix 1001.500000\n")
    (tmp_path / "summary.json").write_text(
        json.dumps({"started_unix": 1001.0, "resumed_wall_s": 0.0, "wall_seconds": 9.2})
    )
    # The last update's row; the summary's end (9.2) comes after the final files.
    (tmp_path / "progress.csv").write_text("version,wall_s\n1,4.5\n2,9.0\n")
    tl = Timeline(tmp_path / "logs" / "launcher.log", start=t0)
    tl.mark("redis ready", 1000.5)
    tl.mark("redis ready", 1000.9)  # the first time counts
    tl.marks["exit"] = 1010.25  # as if the run ended now
    doc = tl.finish(tmp_path)
    assert doc["first env step"] == 1.5  # the earliest actor
    assert doc["last update"] == 10.0
    assert doc["redis ready"] == 0.5
    assert doc["startup_s"] == 1.5
    assert doc["shutdown_s"] == 0.25
    assert doc["overhead_s"] == 1.75
    assert read_timeline(tmp_path) == doc
    lines = (tmp_path / "logs" / "launcher.log").read_text().splitlines()
    assert sum(line.endswith("redis ready") for line in lines) == 1


def test_timeline_without_children_still_closes_its_log(tmp_path: Path):
    tl = Timeline(tmp_path / "launcher.log", start=time.time())
    doc = tl.finish(tmp_path)
    assert "exit" in doc and "overhead_s" not in doc


def test_watch_child_follows_restarts_and_keeps_the_last_exit(tmp_path: Path):
    class Proc:  # a sentinel that becomes readable (EOF) when `end` is called
        def __init__(self) -> None:
            self.sentinel, self._w = os.pipe()

        def end(self) -> None:
            os.close(self._w)

    child = SimpleNamespace(proc=None)
    tl = Timeline(tmp_path / "launcher.log", start=time.time())
    tl.watch_child("learner exited", child)
    first = Proc()
    child.proc = first
    first.end()
    _wait_for(lambda: "learner exited" in tl.marks)
    crashed_at = tl.marks["learner exited"]
    second = Proc()
    child.proc = second  # restarted
    time.sleep(0.2)
    second.end()
    _wait_for(lambda: tl.marks["learner exited"] > crashed_at)
    tl.finish(tmp_path)
    for proc in (first, second):
        os.close(proc.sentinel)


def _wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_nice_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 500) == [0, 100, 200, 300, 400, 500]
    ticks = nice_ticks(-3.2, 71_000)
    assert ticks[0] <= -3.2 and ticks[-1] >= 71_000 and 4 <= len(ticks) <= 8
    assert nice_ticks(5, 5)[-1] > 5  # an empty range still gets an axis


def test_learning_curve_png_from_episodes(tmp_path: Path):
    rec = RunRecorder(tmp_path, solve_threshold=475.0)
    rec.add_episodes([10.0, 20.0, 500.0, 480.0], [10, 20, 500, 480], env_steps=1024, wall_s=1.0)
    rec.add_episodes([490.0], [490], env_steps=2048, wall_s=2.0)
    rec.close()
    out = plot_learning_curve(tmp_path, threshold=475.0)
    with Image.open(out) as png:
        assert png.format == "PNG" and png.size == (700, 400)
    # One episode, no threshold: still a chart.
    (tmp_path / "episodes.csv").write_text("env_steps,wall_s,return,length\n64,0.1,12.0,12\n")
    with Image.open(plot_learning_curve(tmp_path)) as png:
        assert png.size == (700, 400)
