"""Flow control: at most so many batches per policy version, then wait for a newer one.

The learner grants each actor its batches in each weights header (proto/WEIGHTS.md
`actor.grants`): an actor granted none samples nothing with that version and says hello
instead, now and then while it waits, so the learner knows it is there and can grant it a
batch with a later version. With a learner that grants nothing, the number is the header's
`batches_per_version` (0: never wait). Until the first weights it is one.

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
# How often an actor holding no grant says hello while it waits: well inside the learner's
# --actor-timeout-s, after which it would count the actor as gone.
HELLO_EVERY_S = 1.0


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def granted(actor_map: Mapping[str, Any], actor_id: str) -> int | None:
    """This actor's grant in the header's `grants`; None when the learner grants nothing
    (an older learner) or says it in a form this actor cannot read."""
    grants = actor_map.get("grants")
    if grants is None:
        return None
    listed = grants.get("actors", {}) if isinstance(grants, Mapping) else None
    if not isinstance(listed, Mapping):
        log.warning("ignoring actor.grants %r (not a map with an `actors` map)", grants)
        return None
    value = listed.get(actor_id, grants.get("others", 0))
    if not _count(value):
        log.warning("ignoring actor.grants for %s: %r is not a count >= 0", actor_id, value)
        return None
    return int(value)


def flow_limit(actor_map: Mapping[str, Any], *, sync: bool, actor_id: str = "") -> int | None:
    """Batches this actor may send with the version: its grant when the header has one;
    else `batches_per_version`, one in sync mode, None (never wait) for 0. A value that is
    not a count falls back to one."""
    grant = granted(actor_map, actor_id)
    if grant is not None:
        return grant
    value = actor_map.get("batches_per_version", 1)
    if sync:
        return 1
    if not _count(value):
        log.warning("ignoring actor.batches_per_version %r (not a count >= 0): using 1", value)
        return 1
    return value or None


def resend_timeout(floor_s: float, intervals: list[float]) -> float:
    """Seconds a wait for a newer version lasts before a resend: `floor_s`, or twice the
    longest recent interval between versions when that is longer."""
    return max([floor_s, *(2.0 * i for i in intervals)])


class FlowControl:
    """Batches sent with the current version against the limit its header set, and how
    long a wait for the next version lasts before a resend."""

    def __init__(self, *, sync: bool, resend_after_s: float = 5.0, actor_id: str = "") -> None:
        self.sync = sync
        self.actor_id = actor_id
        self.limit: int | None = 1  # None: never wait
        self.sent_at_version = 0
        self._hello_at = float("-inf")
        self.resend_floor_s = resend_after_s
        self._intervals: deque[float] = deque(maxlen=INTERVALS_KEPT)
        self._version_at: float | None = None

    def new_version(self, actor_map: Mapping[str, Any], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._version_at is not None:
            self._intervals.append(now - self._version_at)
        self._version_at = now
        self.limit = flow_limit(actor_map, sync=self.sync, actor_id=self.actor_id)
        self.sent_at_version = 0
        self._hello_at = float("-inf")

    @property
    def resend_after_s(self) -> float:
        return resend_timeout(self.resend_floor_s, list(self._intervals))

    def sent(self) -> None:
        self.sent_at_version += 1

    @property
    def must_wait_for_new(self) -> bool:
        """The current version has sent its share: the next batch needs a newer one."""
        return self.limit is not None and self.sent_at_version >= self.limit

    def hello_due(self, now: float | None = None) -> bool:
        """Whether to say hello now: granted nothing with this version, and not said for
        HELLO_EVERY_S (True marks it said)."""
        if self.limit != 0:
            return False
        now = time.monotonic() if now is None else now
        if now - self._hello_at < HELLO_EVERY_S:
            return False
        self._hello_at = now
        return True
