"""Which side of a run binds, from two shares of time spent waiting, and what to change.

The learner reports the share of its recent time spent waiting for rollouts
(`learner_wait_fraction`, the ratio the Kubernetes HPA scales actors on); each actor the
share of its time spent waiting for weights (`weights_wait`, proto/ROLLOUT.md), which the
learner averages over its live actors (`actors_weights_wait`). Whichever waits at least
half its time is held back by the other:

| learner waits | actors wait | side | more actor replicas |
|---|---|---|---|
| ≥ 50 % | < 50 % or unknown | `actors`: the learner is starved for data | pay |
| < 50 % or unknown | ≥ 50 % | `learner`: actors wait for its updates | do not pay |
| ≥ 50 % | ≥ 50 % | `handoff`: each waits for the other in turn | do not pay |
| < 50 % | < 50 % | `balanced`: both busy | add little |
| ≤ 10 % | unknown (older actors) | `learner` | do not pay |

Anything else (no update yet, nothing reported) is `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# At least half its time waiting: that side is held back by the other.
STARVED = 0.5  # the learner's share of time waiting for rollouts
HELD = 0.5  # the actors' mean share of time waiting for weights
# A learner that hardly waits is busy: with no actor figure, it is taken as the binding side
# (the Kubernetes HPA's target is the same 10 %: above it, it adds actors).
BUSY = 0.1
# What makes a learner faster: threads pay for a CNN's update, not for a small MLP's
# (docs/benchmarks/learner.md), a GPU for both.
FASTER_LEARNER = "a GPU (--device cuda), or for a CNN on CPUs more cores (--torch-threads)"


@dataclass(frozen=True)
class Bottleneck:
    """`side`: actors, learner, handoff, balanced or unknown; `short`: a few words for the
    progress line; `line`: the sentence `ppomq status` prints, with what to change."""

    side: str
    short: str
    line: str


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def bottleneck(learner_wait: float | None, actors_wait: float | None) -> Bottleneck:
    """The binding side from the learner's share of time waiting for rollouts and the
    actors' mean share waiting for weights (None: not known); thresholds in the module
    docstring."""
    lw, aw = learner_wait, actors_wait
    if lw is None and aw is None:
        return Bottleneck("unknown", "", "bottleneck: not known yet (no update reported)")
    starved = lw is not None and lw >= STARVED
    held = aw is not None and aw >= HELD
    learner = "" if lw is None else f"the learner waits {_pct(lw)} of its time for rollouts"
    actors = "" if aw is None else f"actors wait {_pct(aw)} of theirs for weights"
    if starved and not held:
        also = f" ({actors})" if actors else ""
        return Bottleneck(
            "actors",
            f"actor-bound: learner waits {_pct(lw or 0.0)}",
            f"actor-bound: {learner}{also}; more actor replicas pay "
            "(--actors N; compose: --scale actor=N; Kubernetes: the actor HPA)",
        )
    if held and not starved:
        also = f" ({learner})" if learner else ""
        return Bottleneck(
            "learner",
            f"learner-bound: actors wait {_pct(aw or 0.0)}",
            f"learner-bound: {actors}{also}; more actor replicas will not help, a faster "
            f"learner will: {FASTER_LEARNER}",
        )
    if starved and held:
        return Bottleneck(
            "handoff",
            f"hand-offs bind: learner waits {_pct(lw or 0.0)}, actors {_pct(aw or 0.0)}",
            f"hand-offs bind: {learner} and {actors}, each for the other in turn; more actor "
            "replicas will not help: --mode async with --max-staleness 1 or more overlaps "
            "sampling with training",
        )
    if aw is None:
        if lw is not None and lw <= BUSY:
            return Bottleneck(
                "learner",
                f"learner-bound: learner waits {_pct(lw)}",
                f"learner-bound: {learner}; more actor replicas will not help, a faster "
                f"learner will: {FASTER_LEARNER}",
            )
        return Bottleneck(
            "unknown",
            "",
            f"bottleneck: not known: {learner}, and no actor reports its wait for weights",
        )
    if lw is None:
        return Bottleneck("unknown", "", f"bottleneck: not known: {actors}, no update yet")
    return Bottleneck(
        "balanced",
        f"balanced: learner waits {_pct(lw)}, actors {_pct(aw)}",
        f"balanced: {learner} and {actors}; both sides are busy, more actor replicas add little",
    )


def status_bottleneck(status: dict[str, Any]) -> Bottleneck:
    """The verdict for a learner's status document (older learners write neither share)."""
    return bottleneck(status.get("learner_wait_fraction"), status.get("actors_weights_wait"))
