"""A real Docker engine for the compose tests and benchmarks, and `docker compose` on the
project's file.

Where `docker info` already answers (a developer's machine, a CI runner with Docker), the
project's docker-compose.yml runs exactly as a user runs it. Elsewhere the workplace's
engine tool (shared/tools/docker-engine/up.sh: Debian's docker.io, the compose v2 plugin,
and debootstrapped stand-ins for Docker Hub's base images) is started, and the file runs
with only those stand-ins added: the base images, the build's host network, pip's local
index, and a copy of the Dockerfile without its `# syntax=` line (BuildKit cannot fetch
that frontend offline). The tool's own override adds a `build:` to every ppomq service;
this one keeps a build only where the project's file has one, so that what is tested is
the project's one-build layout.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from benchmarks.deploy.composefile import COMPOSE_FILE, REPO

# Where the engine tool may be: $PPOMQ_DOCKER_ENGINE_TOOL (its up.sh), else the workplace's
# shared folder beside the checkout.
TOOL_CANDIDATES = [
    os.environ.get("PPOMQ_DOCKER_ENGINE_TOOL", ""),
    str(REPO.parent / "shared" / "tools" / "docker-engine" / "up.sh"),
    "/work/shared/tools/docker-engine/up.sh",
]


class NoEngine(Exception):
    """No Docker engine answers here and none can be started (the reason is the message)."""


def _docker_answers(env: dict[str, str]) -> bool:
    if shutil.which("docker", path=env.get("PATH")) is None:
        return False
    res = subprocess.run(["docker", "info"], env=env, capture_output=True, timeout=60)
    return res.returncode == 0


def _clean_env() -> dict[str, str]:
    """The caller's environment less every PPOMQ_* / compose knob a developer may have set:
    each test says exactly which settings its run gets."""
    knobs = (
        "PPOMQ_",
        "COMPOSE_",
        "REDIS_",
        "IMAGE",
        "LEARNER_",  # LEARNER_PUBLISH, and the learner group's LEARNER_1_* and *_ADVERTISE
        "WEIGHTSERVER_PUBLISH",
        "TENSORBOARD_",
    )
    return {k: v for k, v in os.environ.items() if not k.startswith(knobs)}


def _offline_override(state: Path, out_dir: Path) -> Path:
    """The tool's stand-ins, with a build only on the services the project builds."""
    tool = yaml.safe_load((state / "compose.offline.yml").read_text())
    ours = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    dockerfile = out_dir / "Dockerfile.offline"
    text = (REPO / "Dockerfile").read_text().splitlines(keepends=True)
    if text and text[0].lstrip("# ").startswith("syntax="):
        text = text[1:]
    dockerfile.write_text("".join(text))
    services = {}
    for name, service in tool["services"].items():
        service = dict(service)
        if "build" in service:
            if "build" not in ours.get(name, {}):
                del service["build"]
            else:
                service["build"] = {**service["build"], "dockerfile": str(dockerfile)}
        if service:
            services[name] = service
    path = out_dir / "compose.offline.yml"
    path.write_text(yaml.safe_dump({"services": services}))
    return path


def _tool_state(env: dict[str, str]) -> Path | None:
    """The engine tool's state dir when DOCKER_HOST is that tool's engine (its base images
    are stand-ins and its builds need the offline override), else None."""
    host = env.get("DOCKER_HOST", "")
    if not host.startswith("unix://"):
        return None
    state = Path(host[len("unix://") :]).parent
    return state if (state / "compose.offline.yml").is_file() else None


def start_engine(out_dir: Path) -> Engine:
    """An engine to run compose on; `NoEngine` says why there is none."""
    env = _clean_env()
    if _docker_answers(env):
        state = _tool_state(env)
        return Engine(env=env, override=_offline_override(state, out_dir) if state else None)
    tried = [c for c in TOOL_CANDIDATES if c]
    tool = next((Path(c) for c in tried if Path(c).is_file()), None)
    if tool is None:
        raise NoEngine(f"`docker info` fails and no engine tool at {', '.join(tried)}")
    if os.geteuid() != 0:
        raise NoEngine(f"`docker info` fails and {tool} needs root to start an engine")
    res = subprocess.run(["bash", str(tool)], env=env, capture_output=True, text=True, timeout=1200)
    if res.returncode != 0:
        raise NoEngine(f"{tool} could not start an engine: {res.stderr.strip()[-400:]}")
    for line in res.stdout.splitlines():
        if line.startswith("export "):
            for item in shlex.split(line[len("export ") :]):
                key, _, value = item.partition("=")
                env[key] = value
    state = _tool_state(env)
    if state is None or not _docker_answers(env):
        raise NoEngine(f"{tool} ran but `docker info` still fails")
    return Engine(env=env, override=_offline_override(state, out_dir))


@dataclass
class Engine:
    env: dict[str, str]
    override: Path | None

    def docker(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        res = subprocess.run(
            ["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and res.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} -> {res.returncode}: {res.stderr}")
        return res.stdout


@dataclass
class ComposeProject:
    """One compose project (a name of its own) of the repository's docker-compose.yml."""

    engine: Engine
    name: str
    env_file: Path
    settings: dict[str, str] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        files = ["-f", str(COMPOSE_FILE)]
        if self.engine.override is not None:
            files += ["-f", str(self.engine.override)]
        return [
            "docker",
            "compose",
            "-p",
            self.name,
            "--env-file",
            str(self.env_file),
            *files,
            *args,
        ]

    def env(self) -> dict[str, str]:
        return {**self.engine.env, **self.settings}

    def run(self, *args: str, timeout: float = 300, check: bool = True):
        res = subprocess.run(
            self.argv(*args),
            env=self.env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"compose {' '.join(args)} -> {res.returncode}:\n"
                f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
            )
        return res

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            env=self.env(),
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=1,
        )

    def containers(self, service: str | None = None) -> list[dict]:
        """`docker compose ps -a` of the project (or one service), one dict per container."""
        out = self.run("ps", "-a", "--format", "json", *([service] if service else [])).stdout
        out = out.strip()
        if not out:
            return []
        if out.startswith("["):
            return json.loads(out)
        return [json.loads(line) for line in out.splitlines()]

    def container_id(self, service: str, index: int = 1) -> str:
        for c in self.containers(service):
            if c["Service"] == service and int(c.get("Number", index) or index) == index:
                return c["ID"]
        raise AssertionError(f"no container {service}-{index} in {self.name}")

    def exec(self, service: str, *cmd: str, timeout: float = 60, check: bool = True):
        return self.run("exec", "-T", service, *cmd, timeout=timeout, check=check)

    def redis_get(self, key: str) -> str | None:
        """GET as the read-only user, from inside the Redis container (which publishes no
        port); None when Redis does not answer."""
        cmd = f'REDISCLI_AUTH="$REDIS_READER_PASSWORD" redis-cli --user ppomq-reader GET {key}'
        res = self.exec("redis", "sh", "-c", cmd, timeout=30, check=False)
        if res.returncode != 0 or "ERR" in res.stdout or "Could not connect" in res.stdout:
            return None
        return res.stdout.strip()

    def leftovers(self) -> list[str]:
        """Containers, networks and volumes of this project still on the engine."""
        label = f"label=com.docker.compose.project={self.name}"
        found = []
        for kind, args in (
            ("container", ["ps", "-aq"]),
            ("network", ["network", "ls", "-q"]),
            ("volume", ["volume", "ls", "-q"]),
        ):
            ids = self.engine.docker(*args, "--filter", label).split()
            found += [f"{kind} {i}" for i in ids]
        return found
