"""Where a `ppomq train` run's time goes, phase by phase.

The launcher marks its own phases as they happen, each as a `launcher.phase` event in
RUN_DIR/events.jsonl (ppomq.core.events) and as a line of run_dir/logs/launcher.log for
people (so a hung start-up or shutdown shows how far it got). At the end it adds the
phases only the children know, from their events (learner ready, the actors' first env
step, the learner's last update), and writes the whole timeline and its overhead to the
log: command start to first env step, plus last update to exit. The children's phases
arrive after the fact, so the finished log is rewritten in time order.

    1795387422.615000   +0.000 s  command start
    1795387423.301234   +0.686 s  redis ready
    ...
    timeline {"command start": 0.0, ..., "overhead_s": 1.8}

Programs read the timeline back from the events (`read_timeline`), not from the log.
This module stays light (the launcher imports it before anything heavy).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from ppomq.core.events import EVENTS_FILE, EventWriter, file_size, read_events

TIMELINE_PREFIX = "timeline "
# The actors' line for people, read only until they emit actor.first_step.


def process_start_unix(pid: int | str = "self") -> float | None:
    """When this process was started (exec'd by the shell), to 10 ms: the command's start,
    which is earlier than anything Python can time from the inside (interpreter start-up
    and the CLI's imports). None where /proc is not there."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # Field 22 (starttime, clock ticks since boot); the command name before it may
        # hold spaces, so count from the closing parenthesis.
        ticks = int(stat.rpartition(")")[2].split()[19])
        # Against the boot clock read now, not /proc/stat's btime: that one is whole
        # seconds, which put the start up to 1 s off.
        since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - since
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class Timeline:
    """Marks phases (name -> Unix time); each goes to `path` and to `events` as it happens."""

    def __init__(self, path: Path, events: EventWriter, *, start: float | None = None) -> None:
        self.path = path
        self.events = events
        # This launch's children write after here (a resumed run's file holds earlier runs).
        self._events_from = file_size(events.path)
        self.t0 = start if start is not None else (process_start_unix() or time.time())
        self.marks: dict[str, float] = {}
        self._lock = threading.Lock()
        self._fh: TextIO | None = open(path, "a")  # noqa: SIM115 (closed in finish)
        self._log_from = self._fh.tell()  # this launch's lines (a resumed run's log goes on)
        self._lines: list[tuple[float, str]] = []
        self._exits_marked: set[int] = set()  # id() of each process whose exit is marked
        self.mark("command start", self.t0)

    def mark(self, phase: str, at: float | None = None, *, again: bool = False) -> None:
        """Note `phase` at `at` (now); the first time counts unless `again`."""
        if phase in self.marks and not again:
            return
        at = time.time() if at is None else at
        with self._lock:  # the exit watchers mark from their own threads
            self.marks[phase] = at
            if self._fh is not None and not self._fh.closed:
                line = f"{at:.6f} {at - self.t0:+8.3f} s  {phase}\n"
                self._lines.append((at, line))
                self._write(line)
                self.events.emit("launcher.phase", t=at, phase=phase)

    def mark_exit(self, phase: str, proc: Any) -> None:
        """Note that `proc` exited as `phase`, once per process: its watcher thread and the
        stop path may both see the same exit; a restarted process's exit is a new one."""
        with self._lock:
            if id(proc) in self._exits_marked:
                return
            self._exits_marked.add(id(proc))
        self.mark(phase, again=True)

    def _write(self, line: str) -> None:
        """One line to the log; a full disk loses the line, never the launcher (which
        reports the full disk itself)."""
        assert self._fh is not None
        with contextlib.suppress(OSError):
            self._fh.write(line)
            self._fh.flush()

    def watch_exit(self, phase: str, proc: Any) -> None:
        """Mark `phase` the moment `proc` (a multiprocessing process) exits, from a daemon
        thread: the launcher itself only looks every half second."""
        if proc is None:
            return
        from multiprocessing.connection import wait

        def _watch() -> None:
            wait([proc.sentinel])
            self.mark(phase)

        threading.Thread(target=_watch, name=f"timeline-{phase}", daemon=True).start()

    def watch_child(self, phase: str, child: Any) -> None:
        """Mark `phase` each time `child.proc` exits, following restarts (a launcher Child
        gets a new proc each time): the last exit counts, the one a shutdown waits for."""
        from multiprocessing.connection import wait

        def _watch() -> None:
            while not self.finished:
                proc = child.proc
                if proc is None:
                    time.sleep(0.1)  # not started yet
                    continue
                if not wait([proc.sentinel], timeout=0.5):
                    continue
                self.mark_exit(phase, proc)
                while child.proc is proc and not self.finished:
                    time.sleep(0.1)  # exited for good, or until its restart

        threading.Thread(target=_watch, name=f"timeline-{phase}", daemon=True).start()

    def _rewrite_in_order(self) -> None:
        """This launch's lines again, sorted by time (the children's phases were written
        when finish() learnt them, after later launcher phases)."""
        assert self._fh is not None
        with contextlib.suppress(OSError):  # a full disk keeps the lines as written
            self._fh.truncate(self._log_from)
            self._fh.writelines(line for _, line in sorted(self._lines, key=lambda x: x[0]))
            self._fh.flush()

    @property
    def finished(self) -> bool:
        return self._fh is None or self._fh.closed

    def finish(self, run_dir: Path) -> dict[str, Any]:
        """Add the children's phases, write the timeline line, close the log; returns it."""
        since = read_events(self.events.path, offset=self._events_from) if self.events.path else []
        ready = [e["t"] for e in since if e["event"] == "learner.ready"]
        if ready:
            self.mark("learner ready", min(ready))
        first = first_env_step_unix(run_dir, since)
        if first is not None:
            self.mark("first env step", first)
        last = last_update_unix(run_dir, since)
        if last is not None:
            self.mark("last update", last)
        self.mark("exit")
        doc = timeline_doc(self.marks)
        with self._lock:
            if self._fh is not None:
                self._rewrite_in_order()
                self._write(TIMELINE_PREFIX + json.dumps(doc) + "\n")
                with contextlib.suppress(OSError):  # a full disk: said by the launcher
                    self._fh.close()
        return doc


def timeline_doc(marks: dict[str, float]) -> dict[str, Any]:
    """Each phase's seconds from command start, in time order, and with both children's
    phases the overhead: startup_s (to the first env step) + shutdown_s (last update to
    exit)."""
    t0 = marks["command start"]
    doc: dict[str, Any] = {
        k: round(v - t0, 3) for k, v in sorted(marks.items(), key=lambda kv: kv[1])
    }
    first, last = marks.get("first env step"), marks.get("last update")
    if first is not None and last is not None and "exit" in marks:
        doc["startup_s"] = round(first - t0, 3)
        doc["shutdown_s"] = round(marks["exit"] - last, 3)
        doc["overhead_s"] = round(doc["startup_s"] + doc["shutdown_s"], 3)
    return doc


def _run_events(run_dir: Path, events: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return read_events(run_dir / EVENTS_FILE) if events is None else events


def first_env_step_unix(run_dir: Path, events: list[dict[str, Any]] | None = None) -> float | None:
    """The earliest actor.first_step among `events` (else the run dir's); None without."""
    firsts = [e["t"] for e in _run_events(run_dir, events) if e["event"] == "actor.first_step"]
    return min(firsts) if firsts else None


def last_update_unix(run_dir: Path, events: list[dict[str, Any]] | None = None) -> float | None:
    """The last learner.stop's last update among `events` (else the run dir's). A learner
    that was killed said none: the last row of progress.csv (written once
    the update's weights are published), its learner clock turned into Unix time with
    summary.json's `started_unix`; without rows, summary.json's own end."""
    stops = [e for e in _run_events(run_dir, events) if e["event"] == "learner.stop"]
    if stops and isinstance(stops[-1].get("last_update_t"), (int, float)):
        return float(stops[-1]["last_update_t"])
    try:
        s = json.loads((run_dir / "summary.json").read_text())
        started = float(s["started_unix"]) - float(s.get("resumed_wall_s", 0.0))
        end = float(s["wall_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        with open(run_dir / "progress.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        if rows and rows[-1].get("wall_s"):
            end = float(rows[-1]["wall_s"])
    except (OSError, ValueError):
        pass
    return started + end


def launch_phases(run_dir: Path) -> dict[str, float]:
    """The last `ppomq train` launch's phases in the run dir's events: name -> Unix time
    (a phase noted again: its last time); {} without any."""
    marks: dict[str, float] = {}
    for e in read_events(run_dir / EVENTS_FILE):
        phase = e.get("phase")
        if e["event"] != "launcher.phase" or not isinstance(phase, str):
            continue
        if phase == "command start":
            marks = {}  # a resumed run: a new launch
        marks[phase] = float(e["t"])
    return marks


def current_phase(run_dir: Path) -> dict[str, Any] | None:
    """The last launch's latest phase, {"phase": name, "t": Unix time}, or None."""
    marks = launch_phases(run_dir)
    if not marks:
        return None
    phase = max(marks, key=marks.__getitem__)
    return {"phase": phase, "t": marks[phase]}


def read_timeline(run_dir: Path) -> dict[str, Any] | None:
    """The last launch's whole timeline (Timeline.finish's), or None before it exited."""
    marks = launch_phases(run_dir)
    return timeline_doc(marks) if "exit" in marks else None
