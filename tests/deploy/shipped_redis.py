"""Redis as deploy/ ships it, without Docker: redis-server started by
deploy/redis/start-redis.sh with users.acl and docker-compose.yml's own redis flags
(append-only file on), on a free loopback port, so that it can be stopped with SIGTERM and
started again on the same data dir, as `docker compose restart redis` or a node drain does.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis

from benchmarks.deploy.composefile import REPO, resolve_compose
from ppomq.core.procutil import die_with_parent
from tests.support import free_port, wait_until

START_SCRIPT = REPO / "deploy" / "redis" / "start-redis.sh"
PASSWORDS = {"learner": "pw-learner", "reader": "pw-reader", "operator": "pw-operator"}


def compose_redis_args(data_dir: Path) -> list[str]:
    """docker-compose.yml's arguments to start-redis.sh, with `--dir` moved to `data_dir`
    (not appended: redis-server applies every --dir, and /data is not there)."""
    args = [str(a) for a in resolve_compose()["services"]["redis"]["command"]]
    args[args.index("--dir") + 1] = str(data_dir)
    return args


@dataclass
class ShippedRedis:
    """One redis-server of `binary` under deploy/redis's start script and ACL file."""

    binary: str
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_file(self) -> Path:
        return self.workdir / "redis.log"

    def url(self, role: str | None = None) -> str:
        """redis:// for user ppomq-`role`, or with no user at all (`default`)."""
        auth = f"ppomq-{role}:{PASSWORDS[role]}@" if role else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "REDIS_SERVER": self.binary,
            "TMPDIR": str(self.workdir),  # where the script writes the rendered ACL file
            **{f"REDIS_{role.upper()}_PASSWORD": pw for role, pw in PASSWORDS.items()},
        }
        args = [
            *compose_redis_args(self.data_dir),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--logfile", str(self.log_file),
        ]  # fmt: skip
        # start-redis.sh execs redis-server: this pid is the server's, SIGTERM reaches it.
        self.proc = subprocess.Popen(
            ["sh", str(START_SCRIPT), *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        """Until the learner's PING is answered: a restarted server answers LOADING (a
        redis-py ConnectionError) while it replays its append-only file."""
        client = redis.Redis.from_url(self.url("learner"), socket_timeout=1)
        try:
            wait_until(client.ping, timeout_s, "redis-server to answer PING",
                       check=self._check_running, not_yet=(redis.ConnectionError,),
                       context=self.log)  # fmt: skip
        finally:
            client.close()

    def _check_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            err = self.proc.stderr.read().decode() if self.proc.stderr else ""
            raise RuntimeError(f"redis-server exited: {err}\n{self.log()}")

    def stop(self) -> None:
        """SIGTERM: Redis flushes its append-only file and exits, as under Docker or k8s."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def append_only_bytes(self) -> bytes:
        """Every append-only file in the data dir: appendonly.aof (Redis 6) or the files
        of appendonlydir/ (Redis >= 7)."""
        files = sorted(p for p in self.data_dir.rglob("appendonly*") if p.is_file())
        return b"".join(p.read_bytes() for p in files)
