"""A CURVE weightserver (`ppomq weightserver --curve-*`, a real process): an allowed actor
key gets weights; with no key, an unknown key or the wrong server key requests time out and
none reaches the server; bad key settings stop it at start with one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
import zmq

from ppomq.commands.keys import generate
from ppomq.core.store.weight_store import WeightStore
from ppomq.core.transport.curvezmq import CurveClient, client_from_settings
from ppomq.core.transport.weights_client import WeightsClient, WeightsTimeoutError

from .helpers import WeightserverProcess, make_weights

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    generate(tmp_path / "keys", 1)
    generate(tmp_path / "other", 1)  # valid keys, not on the allow-list
    return tmp_path


def _client(keys: Path, actor: str, server: str) -> CurveClient:
    curve = client_from_settings(
        SimpleNamespace(
            curve_actor_cert=str(keys / actor / "actors" / "actor-0.key_secret"),
            curve_server_public_cert=str(keys / server / "server.key"),
        )
    )
    assert curve is not None
    return curve


@pytest.fixture
def server(redis_url: str, keys: Path) -> Iterator[WeightserverProcess]:
    proc = WeightserverProcess(
        redis_url, "curve",
        "--curve-server-cert", str(keys / "keys" / "server.key_secret"),
        "--curve-allowed-dir", str(keys / "keys" / "allowed"),
    )  # fmt: skip
    yield proc
    proc.stop()


def test_only_an_allowed_key_gets_weights(
    server: WeightserverProcess, redis_client: redis.Redis, keys: Path
) -> None:
    assert "CURVE" in server.wait_for_log("listening on").string
    WeightStore(redis_client, "curve").publish(*make_weights(1))
    server.wait_for_log("now serving version 1")
    good = _client(keys, "keys", "keys")
    with WeightsClient(server.endpoint, timeout_ms=10_000, curve=good) as client:
        got = client.get_newer(-1)
        assert got is not None and got[0].version == 1
        asked = client.ping()["requests"]  # requests it has had, this ping included
        pub, sec = zmq.curve_keypair()
        for bad in (
            None,  # plain ZeroMQ
            _client(keys, "other", "keys"),  # a key not on the allow-list
            _client(keys, "keys", "other"),  # the wrong server key
            CurveClient(pub, sec, pub),
        ):
            with (
                WeightsClient(server.endpoint, timeout_ms=700, curve=bad) as stranger,
                pytest.raises(WeightsTimeoutError),
            ):
                stranger.get_newer(-1)
        # Not one of their requests reached it (so none was answered): only our ping.
        assert client.ping()["requests"] == asked + 1
        assert client.get_newer(0) is not None  # the allowed key still is


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--curve-server-cert", "{k}/keys/server.key_secret"], "curve_allowed_dir"),
        (["--curve-server-cert", "{k}/missing", "--curve-allowed-dir", "{k}/keys/allowed"],
         "{k}/missing"),
        (["--curve-server-cert", "{k}/keys/allowed/actor-0.key",
          "--curve-allowed-dir", "{k}/keys/allowed"], "no secret key"),
    ],
)  # fmt: skip
def test_bad_key_settings_stop_it_at_start_with_one_line(redis_url, keys, flags, needle):
    args = [f.format(k=keys) for f in flags]
    proc = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "weightserver", "--redis-url", redis_url,
         "--bind", "tcp://127.0.0.1:*", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ppomq: error:")]
    assert len(errors) == 1 and needle.format(k=keys) in errors[0], proc.stderr


def _probe(server: WeightserverProcess, redis_url: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    base |= {"PPOMQ_BIND": server.endpoint, "PPOMQ_RUN_ID": "curve", "PPOMQ_REDIS_URL": redis_url}
    return subprocess.run(
        [sys.executable, "-m", "ppomq.healthcheck", "weightserver"],
        env=base | env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_healthcheck_pings_a_curve_weightserver_with_the_servers_own_key(
    server: WeightserverProcess, redis_url: str, keys: Path
) -> None:
    server.wait_for_log("listening on")
    curve_env = {
        "PPOMQ_CURVE_SERVER_CERT": str(keys / "keys" / "server.key_secret"),
        "PPOMQ_CURVE_ALLOWED_DIR": str(keys / "keys" / "allowed"),
    }
    ok = _probe(server, redis_url, **curve_env)
    assert ok.returncode == 0 and "holds version" in ok.stdout, ok.stdout + ok.stderr
    # Without the server's key the probe is a stranger like any other: no answer.
    plain = _probe(server, redis_url)
    assert plain.returncode == 1 and "did not answer" in plain.stdout, plain.stdout
