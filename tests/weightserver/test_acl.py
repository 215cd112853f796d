"""deploy/redis/users.acl on a real redis-server: each role can do its job and no more."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import redis

from ppomq.core.errors import RedisUnavailableError
from ppomq.core.store.connect import connect_redis
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import WeightStore
from ppomq.core.transport.weights_client import WeightsClient

from ..commands.test_weights_cli import ppomq
from ..conftest import REPO, RedisServer
from .helpers import WeightserverProcess, make_weights

ACL_FILE = REPO / "deploy" / "redis" / "users.acl"
PASSWORDS = {"learner": "pw-learner", "reader": "pw-reader", "operator": "pw-operator"}


@pytest.fixture(scope="module")
def acl_redis(start_redis: object, tmp_path_factory: pytest.TempPathFactory) -> RedisServer:
    """A server running the shipped ACL file, with the placeholder passwords replaced."""
    text = ACL_FILE.read_text()
    for role, password in PASSWORDS.items():
        assert f">CHANGE-ME-{role}" in text
        text = text.replace(f">CHANGE-ME-{role}", f">{password}")
    path: Path = tmp_path_factory.mktemp("acl") / "users.acl"
    path.write_text(text)
    return start_redis("--aclfile", str(path))  # type: ignore[operator]


def url(server: RedisServer, role: str) -> str:
    return server.url_for(f"ppomq-{role}", PASSWORDS[role])


@pytest.fixture
def published(acl_redis: RedisServer) -> WeightStore:
    """Run 'acl' with versions 1..3 published by the learner user."""
    learner = connect_redis(url(acl_redis, "learner"))
    # The learner cannot FLUSHALL (good), so clean the run's own keys instead.
    keys = RunKeys("acl")
    learner.delete(keys.latest, keys.versions, keys.protected, *(keys.weights(v) for v in range(9)))
    store = WeightStore(learner, "acl", keep_versions=2)
    for v in (1, 2, 3):
        store.publish(*make_weights(v))
    return store


def test_learner_publishes_with_retention_but_cannot_flush(
    acl_redis: RedisServer, published: WeightStore
) -> None:
    assert published.latest_version() == 3
    assert [r.version for r in published.list_versions()] == [2, 3]
    with pytest.raises(redis.exceptions.NoPermissionError):
        published.client.flushall()
    with pytest.raises(redis.exceptions.NoPermissionError):
        published.client.publish("some-other-channel", "x")


def test_reader_cannot_publish_or_write(acl_redis: RedisServer, published: WeightStore) -> None:
    reader = connect_redis(url(acl_redis, "reader"))
    keys = RunKeys("acl")
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.publish(keys.channel, "99")
    with pytest.raises(redis.exceptions.NoPermissionError):
        WeightStore(reader, "acl").publish(*make_weights(4))
    for write in (
        lambda: reader.set(keys.latest, 99),
        lambda: reader.delete(keys.weights(3)),
        lambda: reader.sadd(keys.protected, 3),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            write()
    assert published.latest_version() == 3
    # ...while reading works.
    assert WeightStore(reader, "acl").fetch(3, verify=True)[0].version == 3


def test_cli_read_verbs_work_as_reader_and_writes_exit_4(
    acl_redis: RedisServer, published: WeightStore
) -> None:
    reader = url(acl_redis, "reader")
    for verb in (["list"], ["show", "3"], ["diff", "2", "3"], ["verify", "all"]):
        result = ppomq("weights", *verb, "--redis-url", reader, "--run-id", "acl")
        assert result.returncode == 0, result.stderr
    result = ppomq("weights", "protect", "3", "--redis-url", reader, "--run-id", "acl")
    assert result.returncode == 4
    assert "lacks a permission" in result.stderr and "pw-reader" not in result.stderr
    operator = url(acl_redis, "operator")
    result = ppomq("weights", "protect", "3", "--redis-url", operator, "--run-id", "acl")
    assert result.returncode == 0, result.stderr
    assert published.protected_versions() == {3}


def test_default_user_and_wrong_password_are_refused(acl_redis: RedisServer) -> None:
    with pytest.raises(RedisUnavailableError, match="refused the credentials"):
        connect_redis(acl_redis.url)
    wrong = acl_redis.url_for("ppomq-reader", "nope")
    with pytest.raises(RedisUnavailableError, match="refused the credentials") as info:
        connect_redis(wrong)
    assert "nope" not in str(info.value)  # the password is never printed


def test_weightserver_serves_with_the_reader_user(
    acl_redis: RedisServer, published: WeightStore
) -> None:
    server = WeightserverProcess(url(acl_redis, "reader"), "acl")
    try:
        server.wait_for_log("now serving version 3")
        with WeightsClient(server.endpoint, timeout_ms=10_000) as client:
            got = client.get_newer(-1)
            assert got is not None and got[0].version == 3
            published.publish(*make_weights(4))  # the announcement reaches the reader
            newer = client.get_newer(3, wait_ms=20_000)
            assert newer is not None and newer[0].version == 4
    finally:
        assert server.stop() == 128 + signal.SIGTERM  # stopped before its run finished
