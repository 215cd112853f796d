"""Flow control: at most so many batches per policy version, then wait for a newer one.

The learner sets the number in each weights header (proto/WEIGHTS.md `actor`,
`batches_per_version`; 0: never wait). Until the first weights, and with learners that do
not say, it is one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("ppomq.actor")


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


class FlowControl:
    """Batches sent with the current version against the limit its header set."""

    def __init__(self, *, sync: bool) -> None:
        self.sync = sync
        self.limit = 1
        self.sent_at_version = 0

    def new_version(self, actor_map: Mapping[str, Any]) -> None:
        self.limit = flow_limit(actor_map, sync=self.sync)
        self.sent_at_version = 0

    def sent(self) -> None:
        self.sent_at_version += 1

    @property
    def must_wait_for_new(self) -> bool:
        """The current version has sent its share: the next batch needs a newer one."""
        return bool(self.limit) and self.sent_at_version >= self.limit
