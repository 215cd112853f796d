"""WeightStore against a real redis-server: publish, fetch, list, verify, retention."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis

from ppomq.core.store.keys import BLOB_FIELD, RUNS_KEY, RunKeys
from ppomq.core.store.weight_store import (
    RunNotFoundError,
    StaleVersionError,
    VersionNotFoundError,
    WeightStore,
    list_runs,
)
from ppomq.proto.weights_blob import pack_weights, unpack_tensors
from tests.weightserver.helpers import make_weights, mlp_tensors


def test_publish_then_fetch_returns_the_same_tensors(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, "r1")
    header, blob = make_weights(1)
    store.publish(header, blob)
    got_header, got_blob = store.fetch(1, verify=True)
    assert got_header == header
    for name, arr in mlp_tensors(1).items():
        np.testing.assert_array_equal(unpack_tensors(got_header, got_blob)[name], arr)
    assert store.latest_version() == 1
    assert store.fetch_header(1).sha256 == header.sha256


def test_empty_run_has_no_latest_and_does_not_exist(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, "nothing")
    assert store.latest_version() is None
    assert store.fetch_latest() is None
    assert not store.exists()
    with pytest.raises(RunNotFoundError, match="nothing"):
        store.require_run()
    with pytest.raises(VersionNotFoundError):
        store.fetch(1)


def test_publish_marks_the_run_discoverable(redis_client: redis.Redis) -> None:
    WeightStore(redis_client, "a").publish(*make_weights(1))
    WeightStore(redis_client, "b").publish(*make_weights(1))
    assert list_runs(redis_client) == ["a", "b"]
    with pytest.raises(RunNotFoundError, match="runs here: a, b"):
        WeightStore(redis_client, "c").require_run()


def test_publish_refuses_a_version_not_above_latest(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, "r1")
    store.publish(*make_weights(5))
    for v in (5, 3):
        with pytest.raises(StaleVersionError, match="publish version 6"):
            store.publish(*make_weights(v))
    assert store.latest_version() == 5
    assert [r.version for r in store.list_versions()] == [5]


def test_publish_refuses_a_blob_of_the_wrong_size(redis_client: redis.Redis) -> None:
    header, blob = make_weights(1)
    with pytest.raises(ValueError, match="bytes"):
        WeightStore(redis_client, "r1").publish(header, blob[:-4])
    assert WeightStore(redis_client, "r1").latest_version() is None


def test_publish_announces_the_version_on_the_run_channel(redis_client: redis.Redis) -> None:
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(RunKeys("r1").channel)
    pubsub.get_message(timeout=1)  # consume the subscribe confirmation
    WeightStore(redis_client, "r1").publish(*make_weights(7))
    msg = None
    for _ in range(50):
        msg = pubsub.get_message(timeout=0.1)
        if msg:
            break
    assert msg is not None and msg["data"] == b"7"
    pubsub.close()


def test_retention_keeps_the_last_k_and_the_protected(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, "r1", keep_versions=3)
    store.publish(*make_weights(1))
    store.publish(*make_weights(2))
    assert store.protect(2) is True
    assert store.protect(2) is False  # already protected
    deleted = []
    for v in range(3, 8):
        deleted += store.publish(*make_weights(v))
    assert deleted == [1, 3, 4]
    assert [r.version for r in store.list_versions()] == [2, 5, 6, 7]
    assert not redis_client.exists(RunKeys("r1").weights(1))
    # Unprotected, version 2 goes at the next publish.
    assert store.unprotect(2) is True
    assert store.unprotect(2) is False
    assert 2 in store.publish(*make_weights(8))
    assert [r.version for r in store.list_versions()] == [6, 7, 8]


def test_protect_of_a_missing_version_is_not_found(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, "r1")
    store.publish(*make_weights(1))
    with pytest.raises(VersionNotFoundError, match="no version 9"):
        store.protect(9)
    with pytest.raises(VersionNotFoundError):
        store.unprotect(9)
    assert store.protected_versions() == set()


def test_list_versions_reads_headers_with_flags(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, "r1")
    for v in (1, 2, 3):
        store.publish(*make_weights(v))
    store.protect(1)
    rows = store.list_versions()
    assert [(r.version, r.protected, r.latest) for r in rows] == [
        (1, True, False),
        (2, False, False),
        (3, False, True),
    ]
    assert all(r.header is not None and r.header.learner_step == r.version for r in rows)


def test_verify_detects_a_corrupted_blob(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, "r1")
    header, blob = make_weights(1)
    store.publish(header, blob)
    assert store.verify(1).ok
    corrupt = bytearray(blob)
    corrupt[100] ^= 0xFF
    redis_client.hset(RunKeys("r1").weights(1), BLOB_FIELD, bytes(corrupt))
    result = store.verify(1)
    assert not result.ok
    assert result.actual_sha256 != result.expected_sha256 == header.sha256
    assert "sha256" in (result.reason or "")


def test_readers_never_see_latest_before_its_version(redis_client: redis.Redis) -> None:
    """MULTI/EXEC: whenever `latest` says v, weights:v is already there."""
    keys = RunKeys("r1")
    store = WeightStore(redis_client, "r1", keep_versions=1000)
    reader = redis.Redis(connection_pool=redis_client.connection_pool)
    done = threading.Event()
    seen: list[tuple[int, bool]] = []

    def read() -> None:
        while not done.is_set():
            latest = reader.get(keys.latest)
            if latest is not None:
                seen.append((int(latest), bool(reader.exists(keys.weights(int(latest))))))

    thread = threading.Thread(target=read)
    thread.start()
    header, blob = make_weights(0)
    tensors = unpack_tensors(header, blob)
    try:
        for v in range(1, 200):
            store.publish(*pack_weights(v, tensors))
    finally:
        done.set()
        thread.join()
    assert seen, "the reader never ran"
    assert all(present for _, present in seen)


def test_concurrent_publishers_never_move_latest_backwards(redis_client: redis.Redis) -> None:
    tensors = mlp_tensors(0)
    errors: list[int] = []

    def publish_all(versions: range) -> None:
        store = WeightStore(redis.Redis(connection_pool=redis_client.connection_pool), "r1")
        for v in versions:
            try:
                store.publish(*pack_weights(v, tensors))
            except StaleVersionError:
                errors.append(v)

    threads = [threading.Thread(target=publish_all, args=(range(1, 60),)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = WeightStore(redis_client, "r1")
    assert store.latest_version() == 59
    # Each version was stored once: the loser of each race got StaleVersionError.
    assert len(errors) == 59
    assert redis_client.sismember(RUNS_KEY, "r1")
