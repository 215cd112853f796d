"""What every peer runner shares: the solve criterion and the one-line JSON it prints.

Standard library only: the RLlib runner imports this from a venv without ppomq.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from typing import Any

SOLVE_WINDOW = 20  # "mean of the last 20 episodes", the CartPole-v1 convention
RESULT_PREFIX = "E2E_RESULT "  # the line benchmarks/e2e.py looks for on stdout
MAX_CURVE_POINTS = 400


class SolveTracker:
    """Episode returns in order; notes the env step count and time of the first moment
    the mean of the last 20 reaches the target, and a thinned return curve."""

    def __init__(self, target: float) -> None:
        self.target = target
        self.window: deque[float] = deque(maxlen=SOLVE_WINDOW)
        self.episodes = 0
        self.solved_at_env_steps: int | None = None
        self.solved_unix: float | None = None
        self.curve: list[tuple[int, float, float]] = []  # env_steps, unix, mean of last 20

    @property
    def mean(self) -> float | None:
        return sum(self.window) / len(self.window) if self.window else None

    def add(self, ret: float, env_steps: int, now: float | None = None) -> bool:
        """Record one finished episode; True once solved."""
        now = time.time() if now is None else now
        self.episodes += 1
        self.window.append(float(ret))
        mean = self.mean
        assert mean is not None
        self.curve.append((int(env_steps), now, mean))
        if (
            self.solved_at_env_steps is None
            and len(self.window) == SOLVE_WINDOW
            and mean >= self.target
        ):
            self.solved_at_env_steps = int(env_steps)
            self.solved_unix = now
        return self.solved_at_env_steps is not None


def thin(curve: list[Any], limit: int = MAX_CURVE_POINTS) -> list[Any]:
    """At most `limit` points, evenly spaced, always keeping the last."""
    if len(curve) <= limit:
        return list(curve)
    step = len(curve) / limit
    out = [curve[int(i * step)] for i in range(limit)]
    if out[-1] is not curve[-1]:
        out[-1] = curve[-1]
    return out


def emit(doc: dict[str, Any]) -> None:
    """Print the result line (the harness ignores everything else on stdout)."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(doc) + "\n")
    sys.stdout.flush()
