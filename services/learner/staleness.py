"""The staleness gate: which batches a learner at version L may train on."""

from __future__ import annotations

from collections import Counter
from typing import Any


def batch_age(learner_version: int, batch_version: int) -> int:
    """Versions between the policy that collected a batch and the learner's current one."""
    return learner_version - batch_version


class StalenessGate:
    """Accepts batches at most `max_staleness` versions old; counts the rest by reason.

    A batch from the future (version above the learner's) means a stale learner restart or
    a foreign actor: it is rejected too, never trained on.
    """

    def __init__(self, max_staleness: int) -> None:
        self.max_staleness = max_staleness
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.ages: Counter[int] = Counter()

    def within(self, learner_version: int, batch_version: int) -> bool:
        """Whether `admit` would take a batch of `batch_version` (counting nothing)."""
        return 0 <= batch_age(learner_version, batch_version) <= self.max_staleness

    def admit(self, learner_version: int, batch_version: int) -> bool:
        age = batch_age(learner_version, batch_version)
        if age < 0:
            self.rejected["future_version"] += 1
            return False
        if age > self.max_staleness:
            self.rejected["stale"] += 1
            return False
        self.accepted += 1
        self.ages[age] += 1
        return True

    def get_state(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "rejected": dict(self.rejected), "ages": dict(self.ages)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.accepted = int(state.get("accepted", 0))
        self.rejected = Counter(state.get("rejected", {}))
        self.ages = Counter({int(k): v for k, v in state.get("ages", {}).items()})
