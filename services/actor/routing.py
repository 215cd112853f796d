"""Which learner an actor sends its rollouts to.

A learner alone: --learner-addr. A learner group publishes every rank's rollout endpoint
with the weights (the `actor` map's `learners`, proto/WEIGHTS.md); the actor with index i
sends to rank i mod W. Under `ppomq train` indices are 0..n-1, so the ranks get equal
shares; replicas without one (compose's scaled service, a Deployment's pods) take the
CRC-32 of their hostname, which spreads them evenly only in expectation: a few actors may
all land on one rank (the others then take part with nothing, and the group is as fast
as one learner), so give replicas an index where the split matters.
"""

from __future__ import annotations

from typing import Any


def rollout_endpoint(actor_map: dict[str, Any], index: int, default: str) -> tuple[str, int | None]:
    """(the endpoint to send to, the learner rank it belongs to; None for a learner alone)."""
    learners = actor_map.get("learners")
    if (
        not isinstance(learners, list)
        or not learners
        or not all(isinstance(e, str) and e for e in learners)
    ):
        return default, None
    rank = index % len(learners)
    return learners[rank], rank
