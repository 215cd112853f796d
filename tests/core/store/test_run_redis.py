"""Opening a run's Redis from its run dir (ppomq.core.store.run_redis), against real redis-servers:
the run's own while it runs, a private copy of its persisted data after it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import redis

from ppomq.core.errors import UsageError
from ppomq.core.rundir import REDIS_DIR
from ppomq.core.store.embedded import EmbeddedRedis
from ppomq.core.store.run_redis import LIVE, PERSISTED, open_run_redis
from ppomq.core.store.weight_store import WeightStore
from tests.weightserver.helpers import make_weights

RUN = "persisted-run"


def _run_dir_with_redis(tmp_path: Path, versions: int) -> tuple[Path, EmbeddedRedis]:
    """A run dir as `ppomq train` leaves it, its embedded Redis still running."""
    run_dir = tmp_path / "run"
    server = EmbeddedRedis(data_dir=run_dir / REDIS_DIR)
    store = WeightStore(redis.Redis.from_url(server.url), RUN)
    for v in range(versions):
        store.publish(*make_weights(v))
    store.client.close()
    settings = {"run_id": RUN, "redis_url": server.url, "redis_data_dir": REDIS_DIR}
    (run_dir / "settings.json").write_text(json.dumps(settings))
    return run_dir, server


def _latest(url: str) -> int | None:
    client = redis.Redis.from_url(url)
    try:
        return WeightStore(client, RUN).latest_version()
    finally:
        client.close()


def test_a_live_run_is_read_through_its_own_redis(tmp_path):
    run_dir, server = _run_dir_with_redis(tmp_path, versions=3)
    try:
        with open_run_redis(run_dir) as run:
            assert (run.source, run.url, run.run_id) == (LIVE, server.url, RUN)
            assert _latest(run.url) == 2
            run.require_writable("protect")  # a live run's Redis takes writes
    finally:
        server.close()


def test_a_finished_run_is_read_from_a_copy_that_is_gone_afterwards(tmp_path, monkeypatch):
    run_dir, server = _run_dir_with_redis(tmp_path, versions=3)
    server.close()  # the run ended: its data stays in run_dir/redis
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with open_run_redis(run_dir) as run:
        assert run.source == PERSISTED and run.url != server.url
        assert _latest(run.url) == 2
        with pytest.raises(UsageError, match="read-only"):
            run.require_writable("protect")
        with redis.Redis.from_url(run.url, decode_responses=True) as client:
            served = client.config_get("dir")["dir"]
        assert Path(served).is_relative_to(temp.resolve())  # a copy, never run_dir/redis
        copy_url = run.url
    with pytest.raises(redis.ConnectionError):  # its private server was stopped
        redis.Redis.from_url(copy_url, socket_connect_timeout=1).ping()
    assert not list(temp.iterdir())


def test_another_redis_on_a_finished_runs_port_is_not_taken_for_the_run(tmp_path):
    # Loopback ports are reused: the finished run's URL may now reach another run's Redis,
    # holding a run under the same (default) run id.
    run_dir, server = _run_dir_with_redis(tmp_path, versions=3)
    server.close()
    other = EmbeddedRedis(port=server.port, data_dir=tmp_path / "other-run" / REDIS_DIR)
    try:
        WeightStore(redis.Redis.from_url(other.url), RUN).publish(*make_weights(7))
        with open_run_redis(run_dir) as run:
            assert run.source == PERSISTED
            assert _latest(run.url) == 2
    finally:
        other.close()


def test_a_persisted_server_finds_its_data_again_after_a_restart(tmp_path):
    # What a resumed `ppomq train --run-dir` relies on.
    run_dir, server = _run_dir_with_redis(tmp_path, versions=2)
    server.close()
    again = EmbeddedRedis(data_dir=run_dir / REDIS_DIR)
    try:
        assert _latest(again.url) == 1
    finally:
        again.close()


def test_the_newest_run_dir_is_the_one_started_last_of_the_run_id_asked(tmp_path):
    import os

    from ppomq.core.store.run_redis import newest_run_dir

    root = tmp_path / "runs"
    assert newest_run_dir(root) is None  # no runs/ at all
    started = {"cartpole-v1-20261126-100000": ("default", 100), "mine-20261126-090000":
               ("mine", 300), "ale-pong-v5-20261126-110000": ("default", 200)}  # fmt: skip
    for name, (run_id, at) in started.items():
        (root / name).mkdir(parents=True)
        settings = root / name / "settings.json"
        settings.write_text(json.dumps({"run_id": run_id, "redis_url": "redis://x/0"}))
        os.utime(settings, (at, at))
    (root / "compare-a-vs-b").mkdir()  # `ppomq bench compare` output: not a run dir
    (root / "notes.txt").write_text("")
    assert newest_run_dir(root) == root / "mine-20261126-090000"
    assert newest_run_dir(root, run_id="default") == root / "ale-pong-v5-20261126-110000"
    assert newest_run_dir(root, run_id="other") is None
