"""`python -m ppomq.healthcheck`: the probe behind HEALTHCHECK, compose and k8s, run as
those run it (a subprocess with PPOMQ_* settings) against real sockets."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from ppomq.core.metrics import STALLED_AFTER_S, Heartbeat, start_metrics_server
from ppomq.healthcheck import detect_service
from tests.support import free_port, wait_until


def _probe(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "ppomq.healthcheck", *args],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("cmdline", "service"),
    [
        (["/opt/venv/bin/python", "/opt/venv/bin/ppomq", "learner"], "learner"),
        (["/sbin/docker-init", "--", "ppomq", "actor", "--num-envs", "4"], "actor"),
        (["ppomq", "weightserver"], "weightserver"),
        (["ppomq", "train"], None),
        (["redis-server", "--port", "6379"], None),
    ],
)
def test_service_is_read_from_the_command_line(cmdline, service):
    assert detect_service(cmdline) == service


def test_learner_is_healthy_only_while_its_rollout_port_accepts():
    port = free_port()
    res = _probe("learner", PPOMQ_ROLLOUT_BIND=f"tcp://*:{port}")
    assert res.returncode == 1 and "refused" in res.stdout
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        res = _probe("learner", PPOMQ_ROLLOUT_BIND=f"tcp://*:{port}")
    assert res.returncode == 0, res.stdout


def test_learner_liveness_fails_when_its_status_in_redis_stops_advancing(redis_url):
    """`--stalled-after`: the k8s liveness probe. Progress is the `updated_at` of the status
    the learner writes after each update, counted from the learner's start at the latest."""
    import json

    import redis

    port = free_port()
    env = {"PPOMQ_ROLLOUT_BIND": f"tcp://*:{port}", "PPOMQ_REDIS_URL": redis_url,
           "PPOMQ_RUN_ID": "live"}  # fmt: skip
    no_such_pid = "999999999"  # start unknown: the status alone decides
    client = redis.Redis.from_url(redis_url)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        probe = ("learner", "--stalled-after", "60", "--pid", no_such_pid)
        res = _probe(*probe, **env)  # no status yet, start unknown: nothing to hold against
        assert res.returncode == 0 and "not checked" in res.stdout, res.stdout
        client.set("ppomq:live:stats", json.dumps({"version": 7, "updated_at": time.time()}))
        res = _probe(*probe, **env)
        assert res.returncode == 0, res.stdout
        client.set("ppomq:live:stats", json.dumps({"version": 7, "updated_at": time.time() - 300}))
        res = _probe(*probe, **env)
        assert res.returncode == 1 and re.search(r"no progress for 3\d\d s", res.stdout), res.stdout
        # A learner (re)started since then has its own SECONDS before it must have updated.
        young = subprocess.Popen(["sleep", "30"])
        try:
            res = _probe("learner", "--stalled-after", "60", "--pid", str(young.pid), **env)
        finally:
            young.kill()
            young.wait()
        assert res.returncode == 0 and "its start" in res.stdout, res.stdout
        # Redis out of reach: not the learner's fault, and a restart would not fix it.
        down = env | {"PPOMQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
        res = _probe(*probe, **down)
        assert res.returncode == 0 and "not checked" in res.stdout, res.stdout
    # ...but the port check still comes first.
    assert _probe(*probe, **env).returncode == 1
    assert _probe("weightserver", "--stalled-after", "60").returncode == 2


def test_actor_is_probed_on_its_main_loops_heartbeat_not_on_metrics():
    """The actor's /healthz (ppomq.core.metrics): healthy while its main loop's heartbeat is
    fresh, unhealthy once it is older than the limit, though /metrics still answers."""
    now = [1000.0]
    heartbeat = Heartbeat(clock=lambda: now[0])
    port = free_port()
    assert _probe("actor", PPOMQ_METRICS_PORT=str(port)).returncode == 1  # nothing there
    start_metrics_server(port, addr="127.0.0.1", registry=CollectorRegistry(), heartbeat=heartbeat)
    res = _probe("actor", PPOMQ_METRICS_PORT=str(port))
    assert res.returncode == 0 and "turned 0.0 s ago" in res.stdout, res.stdout
    now[0] += STALLED_AFTER_S + 1  # the loop is stuck: no beat
    res = _probe("actor", PPOMQ_METRICS_PORT=str(port))
    assert res.returncode == 1 and "503" in res.stdout and "not turned for" in res.stdout
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200  # what the probe used to ask: no help against a hang
    heartbeat.beat()
    assert _probe("actor", PPOMQ_METRICS_PORT=str(port)).returncode == 0
    # A metrics port that keeps no heartbeat (the learner's, say) is no actor's: unhealthy.
    other = free_port()
    start_metrics_server(other, addr="127.0.0.1", registry=CollectorRegistry())
    res = _probe("actor", PPOMQ_METRICS_PORT=str(other))
    assert res.returncode == 1 and "404" in res.stdout, res.stdout
    res = _probe("actor", PPOMQ_METRICS_PORT="0")
    assert res.returncode == 0 and "nothing to probe" in res.stdout


def test_weightserver_answers_the_ping_for_its_own_run_only(redis_url):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")} | {
        "PPOMQ_REDIS_URL": redis_url,
        "PPOMQ_BIND": f"tcp://127.0.0.1:{port}",
        "PPOMQ_RUN_ID": "probe-run",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "ppomq.cli", "weightserver"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    mine = {k: v for k, v in env.items() if k.startswith("PPOMQ")}

    def running() -> None:
        assert server.poll() is None, server.stderr.read().decode()  # type: ignore[union-attr]

    try:
        wait_until(lambda: _probe("weightserver", **mine).returncode == 0, 30,
                   "the weightserver to answer its probe", check=running,
                   context=lambda: _probe("weightserver", **mine).stdout)  # fmt: skip
        other = {k: v for k, v in env.items() if k.startswith("PPOMQ")} | {"PPOMQ_RUN_ID": "other"}
        res = _probe("weightserver", **other)
        assert res.returncode == 1 and "serves run 'probe-run'" in res.stdout
    finally:
        server.terminate()
        server.wait(timeout=15)


def test_unknown_service_is_a_usage_error():
    assert _probe("redis").returncode == 2
