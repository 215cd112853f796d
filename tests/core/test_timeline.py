"""ppomq.core.timeline (the launcher's phases, from the run's events) and the learning-curve
PNG of a run dir."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

from PIL import Image

from ppomq.core.events import EVENTS_FILE, EventWriter
from ppomq.core.rundir import CURVE_MEAN, CURVE_POINTS, RunRecorder, plot_learning_curve
from ppomq.core.timeline import (
    TIMELINE_PREFIX,
    Timeline,
    current_phase,
    process_start_unix,
    read_timeline,
)
from tests.support import wait_until


def test_process_start_is_before_now_and_recent():
    start = process_start_unix()
    assert start is not None
    assert time.time() - 3600 < start <= time.time()


def test_timeline_adds_the_childrens_phases_from_their_events_and_the_overhead(tmp_path: Path):
    events_path = tmp_path / EVENTS_FILE
    # An earlier launch of the same (resumed) run: none of it counts for this one.
    EventWriter(events_path, "actor-0").emit("actor.first_step", t=900.0, actor_id="old")
    t0 = 1000.0
    launcher = EventWriter(events_path, "launcher")
    tl = Timeline(tmp_path / "launcher.log", launcher, start=t0)
    tl.mark("redis ready", 1000.5)
    tl.mark("redis ready", 1000.9)  # the first time counts
    # The children, from their own processes.
    learner = EventWriter(events_path, "learner")
    learner.emit("learner.ready", t=1001.2, version=0, env_steps=0)
    EventWriter(events_path, "actor-0").emit("actor.first_step", t=1002.0, actor_id="a0")
    EventWriter(events_path, "actor-1").emit("actor.first_step", t=1001.5, actor_id="a1")
    learner.emit("learner.stop", version=9, env_steps=4608, finished=True, last_update_t=1010.0)
    assert read_timeline(tmp_path) is None  # the launcher has not exited
    assert current_phase(tmp_path) == {"phase": "redis ready", "t": 1000.5}
    tl.mark("exit", 1010.25)  # as if the run ended now
    doc = tl.finish(tmp_path)
    assert doc["first env step"] == 1.5  # the earliest actor
    assert doc["learner ready"] == 1.2
    assert doc["last update"] == 10.0
    assert doc["redis ready"] == 0.5
    assert doc["startup_s"] == 1.5
    assert doc["shutdown_s"] == 0.25
    assert doc["overhead_s"] == 1.75
    assert read_timeline(tmp_path) == doc
    assert current_phase(tmp_path) == {"phase": "exit", "t": 1010.25}
    lines = (tmp_path / "launcher.log").read_text().splitlines()
    assert sum(line.endswith("redis ready") for line in lines) == 1
    assert lines[-1] == TIMELINE_PREFIX + json.dumps(doc)  # the people's copy


def test_a_resumed_runs_timeline_is_its_last_launchs(tmp_path: Path):
    for t0 in (100.0, 200.0):
        tl = Timeline(tmp_path / "launcher.log", EventWriter(tmp_path / EVENTS_FILE, "launcher"),
                      start=t0)  # fmt: skip
        tl.mark("children forked", t0 + 1)
        tl.mark("exit", t0 + 3)
        tl.finish(tmp_path)
    assert read_timeline(tmp_path) == {"command start": 0.0, "children forked": 1.0, "exit": 3.0}


def test_timeline_without_children_still_closes_its_log(tmp_path: Path):
    tl = Timeline(tmp_path / "launcher.log", EventWriter(None, "launcher"), start=time.time())
    doc = tl.finish(tmp_path)
    assert "exit" in doc and "overhead_s" not in doc
    assert tl.finished


def test_watch_child_follows_restarts_and_keeps_the_last_exit(tmp_path: Path):
    class Proc:  # a sentinel that becomes readable (EOF) when `end` is called
        def __init__(self) -> None:
            self.sentinel, self._w = os.pipe()

        def end(self) -> None:
            os.close(self._w)

    child = SimpleNamespace(proc=None)
    tl = Timeline(tmp_path / "launcher.log", EventWriter(None, "launcher"), start=time.time())
    tl.watch_child("learner exited", child)
    first = Proc()
    child.proc = first
    first.end()
    wait_until(lambda: "learner exited" in tl.marks, 10, "the first exit's mark")
    crashed_at = tl.marks["learner exited"]
    second = Proc()
    child.proc = second  # restarted
    second.end()  # whether or not the watcher has seen the restart yet
    wait_until(lambda: tl.marks["learner exited"] > crashed_at, 10, "the restart's exit mark")
    tl.finish(tmp_path)
    for proc in (first, second):
        os.close(proc.sentinel)


def _pixels_of(png: Image.Image, color: str) -> int:
    """How many pixels of `png` are exactly `color` (#rrggbb)."""
    rgb = tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))
    counts = png.convert("RGB").getcolors(maxcolors=png.width * png.height) or []
    return sum(n for n, c in counts if c == rgb)


def test_learning_curve_png_from_episodes(tmp_path: Path):
    rec = RunRecorder(tmp_path, solve_threshold=475.0)
    rec.add_episodes([10.0, 20.0, 500.0, 480.0], [10, 20, 500, 480], env_steps=1024, wall_s=1.0)
    rec.add_episodes([490.0], [490], env_steps=2048, wall_s=2.0)
    rec.close()
    out = plot_learning_curve(tmp_path, threshold=475.0)
    with Image.open(out) as png:
        png.load()  # a whole, decodable image, not just a file
        assert png.format == "PNG" and png.size == (700, 400)
        # The mean line and the episodes' points are drawn, in their colours.
        assert _pixels_of(png, CURVE_MEAN) > 100
        assert _pixels_of(png, CURVE_POINTS) > 5
    # One episode, no threshold: still a chart, with its point.
    (tmp_path / "episodes.csv").write_text("env_steps,wall_s,return,length\n64,0.1,12.0,12\n")
    with Image.open(plot_learning_curve(tmp_path)) as png:
        assert png.size == (700, 400) and _pixels_of(png, CURVE_POINTS) > 5


def test_the_finished_log_lists_this_launchs_phases_in_time_order(tmp_path: Path):
    """The children's phases are learnt at the end, after later launcher phases were
    written: the finished log is in time order all the same, an earlier launch's lines
    kept as they were."""
    log = tmp_path / "launcher.log"
    log.write_text("an earlier launch's line\n")
    events_path = tmp_path / EVENTS_FILE
    tl = Timeline(log, EventWriter(events_path, "launcher"), start=1000.0)
    tl.mark("children forked", 1001.0)
    EventWriter(events_path, "learner").emit("learner.ready", t=1001.5, version=0, env_steps=0)
    tl.mark("stop", 1005.0)
    tl.mark("exit", 1006.0)
    tl.finish(tmp_path)
    lines = log.read_text().splitlines()
    assert lines[0] == "an earlier launch's line"
    phases = [line.split(" s  ", 1)[1] for line in lines[1:-1]]
    assert phases == ["command start", "children forked", "learner ready", "stop", "exit"]
    times = [float(line.split()[0]) for line in lines[1:-1]]
    assert times == sorted(times)


def test_one_exit_seen_by_its_watcher_and_by_the_stop_is_marked_once(tmp_path: Path):
    tl = Timeline(tmp_path / "launcher.log", EventWriter(None, "launcher"), start=time.time())
    learner, restarted = object(), object()
    tl.mark_exit("learner exited", learner)  # its watcher thread
    tl.mark_exit("learner exited", learner)  # the stop path, for the same process
    tl.mark_exit("learner exited", restarted)  # a new process's exit is its own
    tl.finish(tmp_path)
    lines = (tmp_path / "launcher.log").read_text().splitlines()
    assert sum(line.endswith("  learner exited") for line in lines) == 2
