"""The learner's recent share of time spent waiting for rollouts, for `ppomq status`.

The same ratio the Kubernetes HPA scales actors on (k8s/components/actor-hpa: the rate of
`ppomq_learner_phase_seconds{phase="wait"}` over the rate of all phases), read from the
learner's phase totals over about the last WINDOW_S seconds, so that a run whose balance
changed (actors added, an env that slowed down) shows the change rather than its whole
history. The totals grow after each update; between two updates the share stays as it was.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping

# Long enough to span a few updates of a slow learner (the Atari preset's take seconds),
# short enough that a change of actors shows within a minute.
WINDOW_S = 30.0


class WaitShare:
    """`observe(totals)` at each status write: the wait phase's share of the phase time
    added within the last `window_s` seconds (at least the last update). The first update
    is left out: its wait is start-up (actors making their envs, fetching the first
    weights), not the run's balance. None until a second update."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.clock = clock
        # (when, wait seconds, all phases' seconds) each time the totals moved; the oldest
        # kept is the newest one at least window_s old.
        self._marks: deque[tuple[float, float, float]] = deque()
        self._start: float | None = None  # the totals before this incarnation's first update

    def observe(self, phase_totals: Mapping[str, float]) -> float | None:
        wait = float(phase_totals.get("wait", 0.0))
        total = float(sum(phase_totals.values()))
        now = self.clock()
        if self._start is None:
            self._start = total  # a resumed learner's totals carry its earlier incarnations'
        if total == self._start:
            return None
        if not self._marks or total != self._marks[-1][2]:
            # The first mark: the end of this incarnation's first update; then each update.
            self._marks.append((now, wait, total))
        # Keep two marks at least: a learner whose last update was long ago shows that one.
        while len(self._marks) > 2 and self._marks[1][0] <= now - self.window_s:
            self._marks.popleft()
        _, wait0, total0 = self._marks[0]
        spent = total - total0
        if spent <= 0:
            return None
        return round(min(max((wait - wait0) / spent, 0.0), 1.0), 4)
