"""2,000 made-up actor ids at a training learner's door, while an honest actor trains.

Real `ppomq weightserver`, `ppomq learner` (sync mode, `--actors 1`) and one `ppomq actor`
train CartPole on loopback; this test (one more peer on the rollout socket) sends one batch
under each of 2,000 fresh ids, each one version behind the learner's: the batch that "only
just missed an update", which a newly started actor sends too. The honest actor is paused
(SIGSTOP) meanwhile, so that the learner waits at one version and every made-up batch
reaches it inside that one-version window, whatever the machine's speed. An id that sends
nothing else must never become an actor a sync update waits for: the learner runs with a
600 s --actor-timeout-s, so one such id counted live holds every update up for ten
minutes. Checked on behaviour alone: the learner's live-actor count stays at the one real
actor throughout, and versions keep coming once the honest actor goes on. No timing
assertion.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from benchmarks.messages.factory import make_batch
from ppomq.core.envs import rollout_spec_for
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import EpisodeStats, encode

from .services import STOPPED_BY_SIGTERM, System

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

T, N = 32, 4  # tests/ops/services.py ROLLOUT
MADE_UP = 2_000


def test_made_up_ids_never_hold_up_a_sync_update_nor_count_as_live(redis_url, tmp_path: Path):
    run_id = "made-up-ids"
    with System(
        tmp_path, redis_url, run_id=run_id, actors=1,
        learner_args=["--mode", "sync", "--actor-timeout-s", "600"],
    ) as system:  # fmt: skip
        system.start()
        system.wait_for(lambda: (system.latest() or 0) >= 3, timeout_s=120, what="3 versions")
        spec = rollout_spec_for(
            "CartPole-v1", run_id=run_id, num_steps=T, max_bytes=1 << 24, num_envs=N
        )
        rng = np.random.default_rng(0)
        live_seen: list[int] = []
        honest = system.actors[0]
        with RolloutSender(system.rollout_addr) as forger:
            os.kill(honest.pid, signal.SIGSTOP)
            try:
                for i in range(MADE_UP):
                    b = make_batch(spec, rng, seq=0, actor_id=f"made-up-{i:04d}", n=N)
                    # No episode ends, none claimed: the learner's own episode check (the
                    # batch's data against its claims) passes it; only the version is off.
                    b.arrays["terminated"][:] = False
                    b.arrays["truncated"][:] = False
                    b.episodes = EpisodeStats([], [])
                    # Sync mode trains on the current version only: one behind just missed.
                    b.policy_version = max((system.latest() or 0) - 1, 0)
                    assert forger.send(encode(b), timeout_ms=30_000)
                    if i % 50 == 0:
                        live_seen.append(int(system.stats().get("live_actors", 0)))

                def refused_all() -> bool:
                    stats = system.stats()
                    live_seen.append(int(stats.get("live_actors", 0)))
                    return stats.get("rejects", {}).get("stale", 0) >= MADE_UP

                # Every made-up batch reached the learner and was refused (a send only
                # queues it).
                system.wait_for(refused_all, timeout_s=120, what="every made-up batch refused")
            finally:
                os.kill(honest.pid, signal.SIGCONT)
            after_flood = system.latest() or 0

            def advanced() -> bool:
                live_seen.append(int(system.stats()["live_actors"]))
                return (system.latest() or 0) >= after_flood + 10

            # A liveness bound, not a timing claim: one made-up id waited for stops the run
            # for --actor-timeout-s (600 s).
            system.wait_for(advanced, timeout_s=180, what="10 more versions after them")
        stats = system.stats()
        assert system.learner.stop(timeout=120) == STOPPED_BY_SIGTERM, system.learner.log()

    assert stats["rejects"].get("stale", 0) >= MADE_UP, stats["rejects"]
    assert stats["ledger"]["actors_tracked"] > 1
    # Only the honest actor was ever one that updates wait for.
    assert max(live_seen) == 1, live_seen
    print(
        f"\nRELIABILITY made-up ids: {MADE_UP} ids one version behind; live actors seen "
        f"{sorted(set(live_seen))}; versions {after_flood} -> {stats['version']} after them"
    )
