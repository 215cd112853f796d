"""The learner's final evaluation as the launcher sees it: from the `learner.evaluate`
events the learner writes to the run's event stream while it evaluates (one as it starts,
then one every few seconds). An evaluation can outlast any fixed wait (Pong's greedy games
take minutes), so it is waited for as long as it says it goes on; only one that stops
saying so for EVAL_SILENT_S is a learner that hangs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ppomq.core.events import file_size, tail_events

# The learner says it evaluates every 2 s (ppomq.learner.finish.EVAL_BEAT_S); this long
# without a word, it hangs.
EVAL_SILENT_S = 30.0


class EvaluationWatch:
    """Follows the learner's `learner.evaluate` events from where the event file ends now
    (an earlier run's events in a resumed run dir are not this run's)."""

    def __init__(
        self, events_file: Path | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = events_file
        self.offset = file_size(events_file)
        self.clock = clock
        self.episodes = 0
        self.done = 0
        self.steps = 0
        self.elapsed_s = 0.0
        self.limit_s = 0.0  # its time bound (0: none)
        self.heard_at: float | None = None  # the last word of a running evaluation

    def poll(self) -> bool:
        """Read what the learner said since the last poll; True when an evaluation began."""
        if self.path is None:
            return False
        events, self.offset = tail_events(self.path, self.offset)
        began = False
        for ev in events:
            if ev["event"] == "learner.evaluate":
                self.heard_at = self.clock()
                self.episodes, self.done = int(ev["episodes"]), int(ev["done"])
                self.steps = int(ev["steps"])
                self.elapsed_s = float(ev.get("elapsed_s", 0.0))
                self.limit_s = float(ev.get("limit_s", 0.0))
                began = began or int(ev["steps"]) == 0
            elif ev["event"] == "learner.stop":
                self.heard_at = None  # evaluated (or not), the summary written
        return began

    @property
    def running(self) -> bool:
        return self.heard_at is not None

    def line(self) -> str:
        """The progress line while it runs: episodes and env steps so far, and its time
        against its bound."""
        bound = f" of at most {self.limit_s:g} s" if self.limit_s > 0 else ""
        return (
            f"final evaluation: {self.done}/{self.episodes} episodes, {self.steps:,} env "
            f"steps  [{self.elapsed_s:5.1f}s{bound}]"
        )

    def stalled(self) -> bool:
        """A running evaluation that has said nothing for EVAL_SILENT_S."""
        return self.heard_at is not None and self.clock() - self.heard_at > EVAL_SILENT_S

    def reset(self) -> None:
        """The learner exited: no evaluation runs (a restarted one says so anew)."""
        self.heard_at = None
