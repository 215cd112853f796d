"""The run's progress: its version, env steps and clock, the records it leaves on disk, and
whether its end is reached. What a checkpoint carries of it, and gives back."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ppomq.core.rundir import RunRecorder
from ppomq.core.settings import LearnerSettings
from ppomq.proto import RolloutBatch


@dataclass
class UpdateShare:
    """A learner-group rank's accepted env steps and episodes since the last update, sent
    to every rank before the update (LearnerLoop.step): env steps count for the group once
    summed, and rank 0 records every rank's episodes."""

    env_steps: int = 0
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    unverified: int = 0


class RunState:
    """Counters that only grow over a run, the learner's clock, and the RunRecorder
    (None on a learner-group rank other than 0: rank 0 records for the group)."""

    def __init__(
        self, *, settings: LearnerSettings, recorder: RunRecorder | None, grouped: bool = False
    ) -> None:
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
        # In a learner group: what this rank accepted since the last update (merged into
        # the counters at the update, with every rank's: merge_shares), and whether the
        # group has ended the run (any rank's end is every rank's).
        self.share: UpdateShare | None = UpdateShare() if grouped else None
        self.group_done = False

    @property
    def wall_s(self) -> float:
        return self.wall_offset + time.monotonic() - self.start

    @property
    def sps(self) -> float:
        return self.env_steps / max(self.wall_s, 1e-9)

    def accept(self, batch: RolloutBatch) -> None:
        """An admitted batch's env steps and the episodes its own data makes (episodes.py),
        never its claims."""
        steps = batch.num_steps * batch.num_envs
        assert batch.verified is not None  # set by the door or by admission
        returns, lengths = list(batch.verified.returns), list(batch.verified.lengths)
        if self.share is not None:  # a group's: counted once every rank's is known
            self.share.env_steps += steps
            self.share.returns += returns
            self.share.lengths += lengths
            self.share.unverified += batch.unverified
            return
        self.env_steps += steps
        self._record_episodes(returns, lengths)
        self.episodes_unverified += batch.unverified

    def _record_episodes(self, returns: list[float], lengths: list[int]) -> None:
        if self.recorder is not None:
            self.recorder.add_episodes(
                returns, lengths, env_steps=self.env_steps, wall_s=self.wall_s
            )

    def take_share(self) -> UpdateShare:
        """This rank's share since the last update; a fresh one starts."""
        assert self.share is not None
        mine, self.share = self.share, UpdateShare()
        return mine

    def merge_shares(self, shares: list[UpdateShare]) -> None:
        """Every rank's share of this update, in rank order: the group's env steps, and
        its episodes recorded (rank 0)."""
        for share in shares:
            self.env_steps += share.env_steps
            self.episodes_unverified += share.unverified
        for share in shares:
            self._record_episodes(share.returns, share.lengths)

    def done(self) -> bool:
        """The run's end: its env steps, its duration, or its target return reached. In a
        learner group, the end the ranks agreed on (any rank's end, said before an update:
        LearnerLoop._agree), so that every rank ends after the same update."""
        if self.share is not None:
            return self.group_done
        return self.reached_end()

    def reached_end(self) -> bool:
        """Whether this learner's own counters and clock say the run has ended."""
        if self.total_steps and self.env_steps >= self.total_steps:
            return True
        if self.duration_s and self.wall_s >= self.duration_s:
            return True
        if self.recorder is None:
            return False  # the target return is rank 0's to see (it records the episodes)
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
            "recorder": {} if self.recorder is None else self.recorder.get_state(),
        }

    def set_state(self, counters: dict[str, Any]) -> None:
        """A checkpoint's counters; one more restart."""
        self.env_steps = int(counters["env_steps"])
        self.trained_samples = int(counters["trained_samples"])
        self.restart_clock(float(counters["wall_s"]))
        self.episodes_unverified = int(counters.get("episodes_unverified", 0))
        self.restarts = int(counters.get("restarts", 0)) + 1
        self.phase_totals = Counter(counters.get("phase_totals", {}))
        if self.recorder is not None:
            self.recorder.set_state(counters.get("recorder", {}), env_steps=self.env_steps)
