"""Scaling with the shipped settings never changes the algorithm: N actor hosts never
change the size of an update, and up to the update's own number of batches almost nothing
is thrown away.

Each service runs on its own network host (benchmarks/deploy/netns_scaling.py) with exactly
the env of docker-compose.yml or of the rendered k8s overlay `local`, changed only in the env
id (an I/O-bound env: two cores do not cap N), the mode and the run length. Async: every update at
steady state trains on the shipped update size (PPOMQ_BATCH_SAMPLES 0: the PPOMQ_ACTORS
hint, 2, × num_envs × num_steps) whatever N is; with one actor, which may send one batch
per version, on the one batch it can send. Sync: one batch from each of the N actors (the
quorum). Every host's batches are among them. Up to the update's batches, batches rejected /
batches taken off the queue stays under 5 % in the steady window and over the whole run
(start-up included); beyond them, what the update cannot take is surplus by design, dropped
at the door for staleness and never for anything else.

N = 1, 2, 4 here (CI time); benchmarks/scaling_netns.py adds N = 8 and records throughput.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.deploy.composefile import tool
from benchmarks.deploy.netns import open_lab
from benchmarks.deploy.netns_scaling import OVERRIDES_OF, measure, why_not
from benchmarks.deploy.service_env import OVERRIDABLE

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(300)]

UPDATES = 6  # steady-state updates measured per run
# docker-compose.yml and k8s ship PPOMQ_BATCH_SAMPLES=0 with the actors hint at 2: updates
# of two actors' batches, whatever number of actors is live.
SHIPPED_UPDATE_BATCHES = 2
MAX_WASTE = 0.05

CASES = [
    *[("compose", n, "async") for n in (1, 2, 4)],
    *[("k8s", n, "async") for n in (1, 2, 4)],
    ("compose", 2, "sync"),
    ("k8s", 4, "sync"),
]


@pytest.mark.parametrize(
    ("source", "actors", "mode"), CASES, ids=[f"{s}-{m}-{n}actors" for s, n, m in CASES]
)
def test_n_actor_hosts_never_change_the_update_size(
    tmp_path: Path, source: str, actors: int, mode: str
):
    reason = why_not()
    if reason:
        pytest.skip(reason)
    if source == "k8s" and tool("kubectl") is None:
        pytest.skip("KUBECTL NOT FOUND: the k8s overlay was NOT rendered (the dev extra)")
    with open_lab(tmp_path) as lab:
        r = measure(lab, tmp_path, source=source, actors=actors, mode=mode, updates=UPDATES)
    print(f"\nSCALING {source} {mode} N={actors}: {r}")

    # Exactly the source's env, but for the names this run changes.
    for service, changes in r["env_changes"].items():
        assert set(changes) <= set(OVERRIDABLE), (service, changes)
        assert set(changes) <= OVERRIDES_OF[service], (service, changes)
    # The update's size, every update of the steady window: the shipped one (async), or
    # one batch per actor (sync's quorum).
    per_update = actors if mode == "sync" else min(actors, SHIPPED_UPDATE_BATCHES)
    want = per_update * r["actor_batch_samples"]
    assert r["samples_per_update"] == [want] * UPDATES, r
    # Every actor host's batches reach the learner in that window, each its share.
    assert set(r["batches_by_host_in_window"]) == {f"actor-{i}" for i in range(1, actors + 1)}
    assert min(r["batches_by_host_in_window"].values()) >= UPDATES * per_update // actors - 1, r
    if actors <= per_update:
        assert r["window_waste"] < MAX_WASTE, r
        # The whole run too, unless actors beyond the shipped PPOMQ_ACTORS joined a sync
        # quorum: each joins with its first batch that makes an update, and its batches
        # before that one are stale (a made-up id must not be able to hold updates up).
        if actors <= SHIPPED_UPDATE_BATCHES:
            assert r["run_waste_ratio"] < MAX_WASTE, r
    assert set(r["run_batches_rejected"]) <= {"stale"}, r
