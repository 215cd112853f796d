"""The run's `finished` marker, read as the end of the run this weightserver serves.

A marker already there when the weightserver starts belongs to a run that ended before it
(a new learner on the run id clears it); only one that appears, or changes, while it serves
ends this run.
"""

from __future__ import annotations

import enum


class MarkerSeen(enum.Enum):
    NOTHING_NEW = "nothing new"
    EARLIER_RUN = "an earlier run's end"
    RUN_ENDED = "this run's end"


class FinishedMarker:
    """Feed it each read of the marker (`observe`); `ended` once this run's end is seen."""

    def __init__(self) -> None:
        self.ended = False
        self._first_read = True
        self._earlier_run: bytes | None = None

    def observe(self, raw: bytes | None) -> MarkerSeen:
        if self.ended:
            return MarkerSeen.NOTHING_NEW
        if self._first_read:
            self._first_read = False
            if raw is not None:
                self._earlier_run = raw
                return MarkerSeen.EARLIER_RUN
        if raw is None:
            self._earlier_run = None  # cleared: the next marker, whatever it says, is ours
            return MarkerSeen.NOTHING_NEW
        if raw == self._earlier_run:
            return MarkerSeen.NOTHING_NEW
        self.ended = True
        return MarkerSeen.RUN_ENDED
