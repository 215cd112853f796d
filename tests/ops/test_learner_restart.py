"""The learner SIGKILLed under running actors and started again, as a supervisor would
(compose `restart: on-failure`, a k8s Deployment): same run dir, run id and port.

The weightserver and both actors are separate processes that nobody touches: they must
find the new learner by themselves, and training must go on from the checkpoint with
versions that keep rising.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .services import STOPPED_BY_SIGTERM, System

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MAX_STALENESS = 2  # the learner's default


def test_a_killed_learner_restarts_and_the_same_actors_train_on(redis_url: str, tmp_path: Path):
    with System(tmp_path, redis_url, run_id="learner-restart") as system:
        system.start()
        system.wait_for(lambda: (system.latest() or 0) >= 5, timeout_s=120, what="5 versions")
        system.wait_for(lambda: len(system.actor_entries()) == 2, timeout_s=60, what="actors")
        # Killed after its first checkpoint (written once a second): the resume path. (A
        # learner killed before any checkpoint starts over from fresh weights.)
        ckpt = system.run_dir / "checkpoints" / "ckpt.pt"
        system.wait_for(ckpt.exists, timeout_s=60, what="a checkpoint")
        actor_ids = set(system.actor_entries())
        actor_pids = [a.pid for a in system.actors]

        system.learner.kill()  # no warm stop: no last checkpoint, no summary
        killed_at = time.monotonic()
        v_killed = system.latest()
        assert v_killed is not None
        system.learner.start()  # at once, as a supervisor does
        restarted_unix = time.time()

        # Versions keep rising: the new learner resumes above everything published.
        new_version_s = system.wait_for(
            lambda: (system.latest() or 0) > v_killed, timeout_s=90, what="a new version"
        )
        assert "resumed from" in system.learner.log(100_000), system.learner.log()

        def both_actors_accepted_again() -> bool:
            entries = system.actor_entries()
            # The restarted learner writes its status from its start (every second), its
            # actors as of its checkpoint: an actor it has not heard from again is not yet there.
            return all(
                a in entries
                and entries[a]["last_seen"] > restarted_unix
                and 0 <= entries[a]["age"] <= MAX_STALENESS  # what the gate admits
                for a in actor_ids
            )

        # The original actor processes (ids are per process) reconnected by themselves and
        # their new batches are admitted; none was restarted, none joined.
        system.wait_for(both_actors_accepted_again, timeout_s=60, what="both actors' batches")
        trained_again_at = time.monotonic()
        assert set(system.actor_entries()) == actor_ids
        assert [a.pid for a in system.actors] == actor_pids and all(
            a.alive() for a in system.actors
        )
        v_after = system.latest()
        assert v_after is not None
        system.wait_for(
            lambda: (system.latest() or 0) >= v_after + 3, timeout_s=60, what="3 more versions"
        )
        print(
            f"\nRELIABILITY learner-sigkill: killed at version {v_killed}; first new version "
            f"{new_version_s:.2f} s after the kill (restart at once, includes the learner's "
            f"start-up); both actors' batches admitted again {trained_again_at - killed_at:.2f}"
            f" s after the kill"
        )
        assert system.learner.stop(timeout=120) == STOPPED_BY_SIGTERM, system.learner.log()
