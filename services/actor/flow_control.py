"""Flow control: at most so many batches per policy version, then wait for a newer one.

The learner sets the number in each weights header (proto/WEIGHTS.md `actor`,
`batches_per_version`; 0: never wait). Until the first weights, and with learners that do
not say, it is one.

A wait that lasts too long ends in a resend: another batch with the version held, in case
the learner lost the last one (it restarted, or the network dropped it) and is waiting for
it. Too long is `--resend-after-s`, or twice the longest of the last intervals between new
versions when that is longer, as a retransmission timeout follows the measured round trip:
a learner whose every update takes longer than the setting (pixels on a CPU under load) is
slow, not stuck, and batches resent to it arrive a version old or are dropped from its full
queue, costing the cores it is short of.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("ppomq.actor")

# Intervals between new versions that the resend timeout looks back over.
INTERVALS_KEPT = 8


def flow_limit(actor_map: Mapping[str, Any], *, sync: bool) -> int:
    """Batches per version the weights header allows; sync actors send one. A value that
    is not a count falls back to one."""
    value = actor_map.get("batches_per_version", 1)
    if sync:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        log.warning("ignoring actor.batches_per_version %r (not a count >= 0): using 1", value)
        return 1
    return value


def resend_timeout(floor_s: float, intervals: list[float]) -> float:
    """Seconds a wait for a newer version lasts before a resend: `floor_s`, or twice the
    longest recent interval between versions when that is longer."""
    return max([floor_s, *(2.0 * i for i in intervals)])


class FlowControl:
    """Batches sent with the current version against the limit its header set, and how
    long a wait for the next version lasts before a resend."""

    def __init__(self, *, sync: bool, resend_after_s: float = 5.0) -> None:
        self.sync = sync
        self.limit = 1
        self.sent_at_version = 0
        self.resend_floor_s = resend_after_s
        self._intervals: deque[float] = deque(maxlen=INTERVALS_KEPT)
        self._version_at: float | None = None

    def new_version(self, actor_map: Mapping[str, Any], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._version_at is not None:
            self._intervals.append(now - self._version_at)
        self._version_at = now
        self.limit = flow_limit(actor_map, sync=self.sync)
        self.sent_at_version = 0

    @property
    def resend_after_s(self) -> float:
        return resend_timeout(self.resend_floor_s, list(self._intervals))

    def sent(self) -> None:
        self.sent_at_version += 1

    @property
    def must_wait_for_new(self) -> bool:
        """The current version has sent its share: the next batch needs a newer one."""
        return bool(self.limit) and self.sent_at_version >= self.limit
