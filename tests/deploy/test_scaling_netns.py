"""Scaling with the shipped settings throws no work away: N actor hosts each send a batch
to every update, and almost nothing they send is thrown away.

Each service runs on its own network host (benchmarks/deploy/netns_scaling.py) with exactly
the env of docker-compose.yml or of the rendered k8s overlay `local`, changed only in the env
id (an I/O-bound env: two cores do not cap N), the mode and the run length. Both ship
PPOMQ_BATCH_SAMPLES 0: an update takes a batch from every live actor (async), as sync's
quorum does, so the update grows with N whatever the PPOMQ_ACTORS hint (2) says, and the
learner grants each actor only what an update takes. Every host's batches are in every
steady update; batches rejected / batches taken off the queue stays under 5 % in the steady
window and over the whole run (start-up included; in sync, actors beyond the hint join the
quorum with their first batch that makes an update, and their batches before that one are
stale: a made-up id must not be able to hold updates up).

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
SHIPPED_HINT = 2  # docker-compose.yml's and k8s's PPOMQ_ACTORS
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
def test_n_actor_hosts_each_send_to_every_update_and_nothing_is_thrown_away(
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
    # The update's size in the steady window: a batch from every host (a late batch of an
    # older version may join one too, never fewer).
    want = actors * r["actor_batch_samples"]
    sizes = r["samples_per_update"]
    assert len(sizes) == UPDATES and min(sizes) >= want and sorted(sizes)[UPDATES // 2] == want, r
    # Every actor host's batches reach the learner in that window, one per update.
    assert set(r["batches_by_host_in_window"]) == {f"actor-{i}" for i in range(1, actors + 1)}
    assert min(r["batches_by_host_in_window"].values()) >= UPDATES - 1, r
    assert r["window_waste"] < MAX_WASTE, r
    if mode == "async" or actors <= SHIPPED_HINT:
        assert r["run_waste_ratio"] < MAX_WASTE, r
    assert set(r["run_batches_rejected"]) <= {"stale"}, r
