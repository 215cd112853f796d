"""A failed CURVE handshake is visible on both ends: real `ppomq weightserver` and
`ppomq actor` processes on loopback, keys from `ppomq keys generate`.

An actor whose key is not on the allow-list, and one given another server's public key,
used to wait forever, logging only "still waiting for weights newer than v-1". Now each
logs the likely cause (and what to do), and the weightserver logs and counts the refusals
(ppomq_curve_handshake_failures_total on /metrics).
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import free_port, wait_until

from .services import PPOMQ, ROLLOUT, Service, while_up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NOT_ALLOWED = "is not in the server's allow-list"
WRONG_SERVER_KEY = "is most likely not that server's public key"


def _keys(root: Path, name: str) -> Path:
    out = root / name
    done = subprocess.run(
        [*PPOMQ, "keys", "generate", "--out", str(out), "--actors", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _failures(port: int) -> dict[tuple[str, str], float]:
    """The weightserver's ppomq_curve_handshake_failures_total, by (side, reason)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    return {
        (s.labels["side"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "ppomq_curve_handshake_failures"
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_a_refused_key_and_a_wrong_server_key_are_named_on_both_ends(redis_url, tmp_path):
    keys = _keys(tmp_path, "keys")
    other = _keys(tmp_path, "other")
    weights = f"tcp://127.0.0.1:{free_port()}"
    metrics_port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    weightserver = Service(
        "weightserver",
        [*PPOMQ, "weightserver", "--redis-url", redis_url, "--run-id", "auth",
         "--bind", weights, "--metrics-port", str(metrics_port),
         "--curve-server-cert", str(keys / "server.key_secret"),
         "--curve-allowed-dir", str(keys / "allowed")],
        logs / "weightserver.log",
    )  # fmt: skip

    def actor(name: str, actor_cert: Path, server_public: Path) -> Service:
        return Service(
            name,
            [*PPOMQ, "actor", "--run-id", "auth", *ROLLOUT, "--actor-index", "0",
             "--learner-addr", f"tcp://127.0.0.1:{free_port()}", "--weightserver-addr", weights,
             "--curve-actor-cert", str(actor_cert), "--curve-server-public-cert",
             str(server_public)],
            logs / f"{name}.log",
        )  # fmt: skip

    # A valid key pair that the weightserver's allow-list does not hold.
    not_allowed = actor("not-allowed", other / "actors" / "actor-0.key_secret", keys / "server.key")
    # An allowed key, but the public key of another server.
    allowed = keys / "actors" / "actor-0.key_secret"
    wrong_server = actor("wrong-server", allowed, other / "server.key")
    services = [weightserver, not_allowed, wrong_server]

    watch = while_up(*services, about=lambda: f"metrics {_failures(metrics_port)}")

    try:
        for s in services:
            s.start()
        wait_until(lambda: NOT_ALLOWED in not_allowed.log(10**6), 90,
                   "the refused actor's cause line", **watch)  # fmt: skip
        wait_until(lambda: WRONG_SERVER_KEY in wrong_server.log(10**6), 90,
                   "the wrong key's cause line", **watch)  # fmt: skip
        wait_until(
            lambda: (
                {("server", "key_not_allowed"), ("server", "wrong_server_key")}
                <= set(_failures(metrics_port))
            ),
            90,
            "the weightserver's counts",
            **watch,
        )
        counted = _failures(metrics_port)
    finally:
        for s in reversed(services):
            s.stop(timeout=30)
    assert counted[("server", "key_not_allowed")] >= 1, counted
    assert counted[("server", "wrong_server_key")] >= 1, counted
    ws_log = weightserver.log(10**6)
    assert "its key is not in the allow-list" in ws_log, ws_log
    assert "sealed its hello for another server key" in ws_log, ws_log
    for s in (not_allowed, wrong_server):
        text = s.log(10**6)
        assert "first env step" not in text, text  # refused: no weights, no env step
        assert "Traceback" not in text, text
    # The refused actor names its own key, so its user can tell which file to copy.
    assert "-k" in not_allowed.log(10**6).split(NOT_ALLOWED)[0].rsplit("refused", 1)[1]
