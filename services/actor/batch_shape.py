"""The batch shape the learner takes: it decodes only batches of its own `num_steps`
(proto/ROLLOUT.md's shape check), and says that number in each weights header
(proto/WEIGHTS.md `actor`, `num_steps`). An actor set to another number would have every
batch refused, forever; it stops at its first weights instead, with the setting to change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ppomq.core.errors import UsageError

log = logging.getLogger("ppomq.actor")


def check_num_steps(actor_map: Mapping[str, Any], num_steps: int) -> None:
    """UsageError when the header's `num_steps` differs from ours. A learner that does not
    say (an older one) is not checked; a value that is not a count is ignored, said once
    per version."""
    want = actor_map.get("num_steps")
    if want is None:
        return
    if isinstance(want, bool) or not isinstance(want, int) or want <= 0:
        log.warning("ignoring actor.num_steps %r (not a count > 0)", want)
        return
    if want != num_steps:
        raise UsageError(
            f"the learner takes batches of {want} steps per env and this actor collects "
            f"{num_steps}: set --num-steps {want} (PPOMQ_NUM_STEPS) on the actor, or start "
            "the learner with the actor's"
        )
