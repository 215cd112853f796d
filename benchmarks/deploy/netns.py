"""docker-compose.yml's services on network hosts of this machine: each host a network
namespace (`ip netns`), linked by a veth pair to a bridge in a hub namespace, with its own
address in 10.231.0.0/24 and an /etc/netns/HOST/hosts that maps the service names as
Compose's DNS would. `Host` maps one compose service onto a host (argv, env, volumes as
folders); `start_order` and `wait_healthy` start services as Compose does. Needs root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from benchmarks.deploy.composefile import REPO

VENV_BIN = Path(sys.executable).parent
SUBNET = "10.231.0"
# The image's ENV (Dockerfile, runtime stage) besides PATH.
IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
# A service that SIGTERM stopped before its run's end exits 128 + 15 (ppomq.core.signals).
STOPPED_BY_SIGTERM = 128 + signal.SIGTERM


def why_not_netns() -> str | None:
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

    def start(
        self, host: str, argv: list[str], env: dict[str, str], cwd: Path, name: str = ""
    ) -> None:
        """Start `argv` on `host`; the process is known (procs, log, stop) by `name`, the
        host's name unless a host runs several."""
        name = name or host
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the lab
        self.procs[name] = subprocess.Popen(
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


def start_order(services: dict) -> list[str]:
    order: list[str] = []

    def visit(name: str) -> None:
        for dep in services[name].get("depends_on", {}):
            visit(dep)
        if name not in order:
            order.append(name)

    for name in services:
        visit(name)
    return order


def wait_healthy(lab: Lab, host: Host, timeout_s: float = 90) -> None:
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
