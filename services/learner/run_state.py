"""The run's progress: its version, env steps and clock, the records it leaves on disk, and
whether its end is reached. What a checkpoint carries of it, and gives back."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ppomq.core.rundir import RunRecorder
from ppomq.core.settings import LearnerSettings
from ppomq.proto import RolloutBatch


class RunState:
    """Counters that only grow over a run, the learner's clock, and the RunRecorder."""

    def __init__(self, *, settings: LearnerSettings, recorder: RunRecorder) -> None:
        self.total_steps = settings.total_steps
        self.duration_s = settings.duration_s
        self.target_return = settings.target_return
        self.recorder = recorder
        self.version = 0
        # Env steps of accepted batches: the run's progress (--total-steps, lr annealing,
        # SPS, episodes).
        self.env_steps = 0
        self.trained_samples = 0
        # Episodes that ended in accepted batches whose start was not seen: not counted.
        self.episodes_unverified = 0
        self.phase_totals: Counter[str] = Counter()
        self.restarts = 0
        self.finished = False  # set once the run has ended normally
        # The learner's clock: a resumed run goes on from the wall time it had reached.
        self.wall_offset = 0.0
        self.start = time.monotonic()
        self.start_unix = time.time()  # the same instant on the Unix clock
        # The last update (the learner's liveness probe reads it from the status).
        self.updated_at = time.time()
        self.last_stats: dict[str, float] = {}

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.monotonic() - self.start

    @property
    def sps(self) -> float:
        return self.env_steps / max(self.wall_s, 1e-9)

    def accept(self, batch: RolloutBatch) -> None:
        """An admitted batch's env steps and the episodes its own data makes (episodes.py),
        never its claims."""
        self.env_steps += batch.num_steps * batch.num_envs
        assert batch.verified is not None  # set by the door or by admission
        self.recorder.add_episodes(
            batch.verified.returns, batch.verified.lengths,
            env_steps=self.env_steps, wall_s=self.wall_s,
        )  # fmt: skip
        self.episodes_unverified += batch.unverified

    def done(self) -> bool:
        """The run's end: its env steps, its duration, or its target return reached."""
        if self.total_steps and self.env_steps >= self.total_steps:
            return True
        if self.duration_s and self.wall_s >= self.duration_s:
            return True
        mean = self.recorder.mean_return
        return (
            self.target_return is not None
            and len(self.recorder.window) == self.recorder.window.maxlen
            and mean is not None
            and mean >= self.target_return
        )

    def restart_clock(self, wall_s: float) -> None:
        """Go on from `wall_s` of learner time (a resumed run)."""
        self.wall_offset = wall_s
        self.start = time.monotonic()

    def get_state(self) -> dict[str, Any]:
        """The checkpoint's share of the run (its keys are the checkpoint's counters)."""
        return {
            "env_steps": self.env_steps,
            "trained_samples": self.trained_samples,
            "wall_s": self.wall_s,
            "episodes_unverified": self.episodes_unverified,
            "restarts": self.restarts,
            "phase_totals": dict(self.phase_totals),
            "recorder": self.recorder.get_state(),
        }

    def set_state(self, counters: dict[str, Any]) -> None:
        """A checkpoint's counters; one more restart."""
        self.env_steps = int(counters["env_steps"])
        self.trained_samples = int(counters["trained_samples"])
        self.restart_clock(float(counters["wall_s"]))
        self.episodes_unverified = int(counters.get("episodes_unverified", 0))
        self.restarts = int(counters.get("restarts", 0)) + 1
        self.phase_totals = Counter(counters.get("phase_totals", {}))
        self.recorder.set_state(counters.get("recorder", {}), env_steps=self.env_steps)
