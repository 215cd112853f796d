"""Actors come and go under a running learner (what `kubectl scale`, an HPA or a crash do).

Three actors, two SIGKILLed and never restarted, then two new actor processes: the learner
was told `--actors 3` (a hint), trains on through the loss after at most its actor timeout,
and uses the new actors' batches. In async and in sync mode.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from .services import STOPPED_BY_SIGTERM, System, max_update_gap

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ACTOR_TIMEOUT_S = 1.0
# A liveness bound for the longest pause between updates: without elastic collection the
# learner waits forever for the killed actors; with it, one actor timeout plus scheduling
# noise on two busy cores.
PAUSE_BOUND_S = 10 * ACTOR_TIMEOUT_S


def _samples_per_update(run_dir: Path) -> list[tuple[int, int]]:
    with open(run_dir / "progress.csv", newline="") as f:
        return [(int(r["version"]), int(float(r["charts/samples"]))) for r in csv.DictReader(f)]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_actors_scaled_3_to_1_to_3_keep_training_going(redis_url, tmp_path: Path, mode: str):
    with System(
        tmp_path, redis_url, run_id=f"elastic-{mode}", actors=3,
        learner_args=["--mode", mode, "--actor-timeout-s", str(ACTOR_TIMEOUT_S)],
    ) as system:  # fmt: skip
        system.start()
        system.wait_for(lambda: len(system.actor_entries()) == 3, timeout_s=120, what="3 actors")
        system.wait_for(lambda: (system.latest() or 0) >= 5, timeout_s=60, what="5 versions")

        for actor in system.actors[1:]:
            actor.kill()  # SIGKILL, as a node loss or a scale-down without grace
        v_kill = system.latest() or 0
        down = system.actors[1:]
        system.wait_for(
            lambda: (system.latest() or 0) >= v_kill + 10, timeout_s=60,
            what="10 versions with one actor", allow_down=down,
        )  # fmt: skip
        v_one = system.latest() or 0

        new = [system._actor(3), system._actor(4)]
        system.actors.extend(new)
        for actor in new:
            actor.start()
        known = set(system.actor_entries())

        def new_actors_sent() -> bool:
            entries = system.actor_entries()
            fresh = [e for a, e in entries.items() if a not in known]
            return len(fresh) == 2 and all(e["batches"] >= 3 for e in fresh)

        system.wait_for(new_actors_sent, timeout_s=120, what="the new actors", allow_down=down)
        v_three = system.latest() or 0
        system.wait_for(
            lambda: (system.latest() or 0) >= v_three + 5, timeout_s=60,
            what="5 versions with 3 actors again", allow_down=down,
        )  # fmt: skip
        assert system.learner.stop(timeout=120) == STOPPED_BY_SIGTERM, system.learner.log()

        rows = system.progress()
        gap, gap_end = max_update_gap(rows, after_version=v_kill)
        assert gap < PAUSE_BOUND_S, (gap, gap_end)
        per_update = dict(_samples_per_update(system.run_dir))
        batch = 4 * 32
        # With one actor an update trains on its batch alone; with three again, on three
        # batches: the new actors' batches are trained on, not just received.
        assert batch in {per_update[v] for v in range(v_kill + 3, v_one + 1) if v in per_update}
        late = [per_update[v] for v in range(v_three + 1, max(per_update) + 1) if v in per_update]
        assert 3 * batch in late, late
        print(
            f"\nRELIABILITY elastic-{mode}: 2 of 3 actors SIGKILLed at v{v_kill}; longest pause "
            f"between updates {gap:.2f} s (ending at v{int(gap_end)}); 2 new actors' batches "
            f"trained from v{v_three}; samples per update late {late[-5:]}"
        )
