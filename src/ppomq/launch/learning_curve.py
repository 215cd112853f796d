"""`ppomq train` draws the run's learning curve itself, and tells its learner not to.

Drawn by the learner, the curve costs the end of every run matplotlib's import (about a
third of a second on a 2-core machine, a tenth of a CartPole run to 475) while every
process waits for the learner to exit. Here one background thread imports matplotlib while
the run trains, at the lowest CPU priority (the learner and the actors keep their cores),
then draws RUN_DIR/learning_curve.png once the learner has exited, while the other
services stop. The PNG is the one the learner would draw (ppomq.core.rundir).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

from ppomq.launch.messages import note

# os.setpriority's nicest value: the thread runs only where a core would idle.
LOWEST_PRIORITY = 19


class CurvePainter:
    """One thread: import matplotlib now, draw when asked (`draw`), done by `finish`."""

    def __init__(self) -> None:
        self._asked = threading.Event()
        self._request: tuple[Path, float | None] | None = None
        self.drawn: Path | None = None
        self._thread = threading.Thread(target=self._run, name="learning-curve", daemon=True)

    def start(self) -> CurvePainter:
        self._thread.start()
        return self

    def draw_for(self, run_dir: Path, since_unix: float) -> bool:
        """Draw the curve of `run_dir`'s episodes.csv as soon as matplotlib is loaded, if
        the learner wrote its summary there since `since_unix` with episodes in it (when it
        would have drawn the curve itself), with the summary's threshold line. Whether it
        will be drawn."""
        summary = run_dir / "summary.json"
        try:
            if summary.stat().st_mtime < since_unix:
                return False  # an earlier run's: this launch's learner wrote none
            doc = json.loads(summary.read_text())
        except (OSError, ValueError):
            return False
        if not doc.get("episodes"):
            return False
        self._request = (run_dir, doc.get("solve_threshold"))
        self._asked.set()
        return True

    def finish(self, deadline: float) -> Path | None:
        """Wait until the curve asked for is drawn (or nothing was asked for and the thread
        has ended), until `deadline` (time.monotonic()); the PNG's path, or None."""
        self._asked.set()  # nothing asked for by now: the thread ends after its import
        if self._thread.ident is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        return self.drawn

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # best effort: Linux threads only
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot  # the import is the point: drawing later is quick
        except Exception as exc:  # the run's files matter more than its picture
            note(f"matplotlib did not load ({exc}): no learning_curve.png")
            return
        self._asked.wait()
        if self._request is None:
            return
        from ppomq.core.rundir import plot_learning_curve

        run_dir, threshold = self._request
        try:
            self.drawn = plot_learning_curve(run_dir, threshold=threshold)
        except OSError as exc:  # a full or read-only disk: said, not raised
            note(f"learning_curve.png not written: {exc}")
