"""Where a `ppomq train` run's time goes, phase by phase: run_dir/logs/launcher.log.

The launcher marks its own phases as they happen (one line each, so a hung start-up or
shutdown shows how far it got) and, at the end, adds the two that only the children know
(the actors' first env step, the learner's last update) and one JSON line with the whole
timeline and the overhead: command start to first env step, plus last update to exit.

    1795387422.615000   +0.000 s  command start
    1795387423.301234   +0.686 s  redis ready
    ...
    timeline {"command start": 0.0, ..., "overhead_s": 1.8}

This module stays light (the launcher imports it before anything heavy).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, TextIO

FIRST_STEP_RE = re.compile(r"first env step at unix ([0-9.]+)")
TIMELINE_PREFIX = "timeline "


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
    """Marks phases (name -> Unix time) and writes each to `path` as it happens."""

    def __init__(self, path: Path, *, start: float | None = None) -> None:
        self.path = path
        self.t0 = start if start is not None else (process_start_unix() or time.time())
        self.marks: dict[str, float] = {}
        self._lock = threading.Lock()
        self._fh: TextIO | None = open(path, "a")  # noqa: SIM115 (closed in finish)
        self.mark("command start", self.t0)

    def mark(self, phase: str, at: float | None = None, *, again: bool = False) -> None:
        """Note `phase` at `at` (now); the first time counts unless `again`."""
        if phase in self.marks and not again:
            return
        at = time.time() if at is None else at
        with self._lock:  # the exit watchers mark from their own threads
            self.marks[phase] = at
            if self._fh is not None and not self._fh.closed:
                self._write(f"{at:.6f} {at - self.t0:+8.3f} s  {phase}\n")

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
                self.mark(phase, again=True)
                while child.proc is proc and not self.finished:
                    time.sleep(0.1)  # exited for good, or until its restart

        threading.Thread(target=_watch, name=f"timeline-{phase}", daemon=True).start()

    @property
    def finished(self) -> bool:
        return self._fh is None or self._fh.closed

    def finish(self, run_dir: Path) -> dict[str, Any]:
        """Add the children's phases, write the timeline line, close the log; returns it."""
        first = first_env_step_unix(run_dir)
        if first is not None:
            self.mark("first env step", first)
        last = last_update_unix(run_dir)
        if last is not None:
            self.mark("last update", last)
        self.mark("exit")
        doc: dict[str, Any] = {
            k: round(v - self.t0, 3) for k, v in sorted(self.marks.items(), key=lambda kv: kv[1])
        }
        if first is not None and last is not None:
            doc["startup_s"] = round(first - self.t0, 3)
            doc["shutdown_s"] = round(self.marks["exit"] - last, 3)
            doc["overhead_s"] = round(doc["startup_s"] + doc["shutdown_s"], 3)
        with self._lock:
            if self._fh is not None:
                self._write(TIMELINE_PREFIX + json.dumps(doc) + "\n")
                with contextlib.suppress(OSError):  # a full disk: said by the launcher
                    self._fh.close()
        return doc


def first_env_step_unix(run_dir: Path) -> float | None:
    """The earliest `first env step at unix T` any actor logged (actor-*.log)."""
    firsts: list[float] = []
    for log in sorted((run_dir / "logs").glob("actor-*.log")):
        try:
            firsts += [float(m) for m in FIRST_STEP_RE.findall(log.read_text(errors="replace"))]
        except OSError:
            continue
    return min(firsts) if firsts else None


def last_update_unix(run_dir: Path) -> float | None:
    """The end of the learner's last update: the last row of progress.csv (written once the
    update's weights are published), its learner clock converted to Unix time with
    summary.json's `started_unix` (as benchmarks/e2e.py does). Without progress rows,
    summary.json's own end (which comes later: after the checkpoint and final weights)."""
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


def read_timeline(run_dir: Path) -> dict[str, Any] | None:
    """The last timeline line of run_dir/logs/launcher.log, or None."""
    try:
        lines = (run_dir / "logs" / "launcher.log").read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith(TIMELINE_PREFIX):
            return json.loads(line[len(TIMELINE_PREFIX) :])
    return None
