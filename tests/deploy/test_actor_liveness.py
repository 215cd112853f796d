"""The actor's liveness probe fails when its main loop hangs, not only when it is gone.

k8s/base/actor/deployment.yaml probes `/healthz` on the metrics port, and the image's
HEALTHCHECK and compose run `python -m ppomq.healthcheck actor`, which asks the same. The
actor here is real (`python -m ppomq.cli actor`) and so are its weightserver and Redis; its
env is benchmarks/envs.py's SleepEnv with a step that sleeps an hour: an env waiting on
something that never answers, the hang the old `/metrics` probe could not see (a thread of
its own serves /metrics, and it answers all the same).
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import redis

from benchmarks.deploy.composefile import REPO
from benchmarks.envs import SLEEP_ENV_SPEC, STEP_S_VAR
from ppomq.core.envs import rollout_spec_for
from ppomq.core.models import build_model, model_spec_for, numpy_state
from ppomq.core.store.weight_store import WeightStore
from ppomq.proto.weights_blob import pack_weights
from tests.support import free_port, wait_until

from ..weightserver.helpers import WeightserverProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RUN_ID = "stalled"
STALLED_AFTER_S = 2  # the probe's limit here (?stalled_after=); the image's default is 120
# What the actor logs once it has waited 10 s for weights: proof it has waited past the limit.
WAITING = "still waiting for weights newer than"


def _get(url: str) -> tuple[int, str]:
    """(HTTP status, body); (0, why) while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _publish_first_weights(redis_url: str) -> None:
    """Version 1 of a policy for the env, as the learner would publish it."""
    spec = rollout_spec_for(SLEEP_ENV_SPEC, run_id=RUN_ID, num_steps=8, max_bytes=2**24)
    policy = build_model(model_spec_for(spec, hidden=[16]))
    header, blob = pack_weights(1, numpy_state(policy), model=policy.spec)
    WeightStore(redis.Redis.from_url(redis_url), RUN_ID).publish(header, blob)


def test_an_actor_stuck_in_an_env_step_fails_its_probe_while_metrics_still_answer(
    redis_url, tmp_path
):
    server = WeightserverProcess(redis_url, RUN_ID)
    port = free_port()
    log_path = tmp_path / "actor.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")} | {
        "PYTHONPATH": str(REPO),  # benchmarks.envs, for the "module:EnvId" form
        STEP_S_VAR: "3600",  # every env step: an hour
        "PPOMQ_RUN_ID": RUN_ID,
        "PPOMQ_ENV_ID": SLEEP_ENV_SPEC,
        "PPOMQ_NUM_ENVS": "1",
        "PPOMQ_NUM_STEPS": "8",
        "PPOMQ_MAX_MESSAGE_BYTES": str(2**24),
        "PPOMQ_VECTORIZATION": "sync",
        "PPOMQ_METRICS_PORT": str(port),
        "PPOMQ_WEIGHTSERVER_ADDR": server.endpoint,
        "PPOMQ_LEARNER_ADDR": f"tcp://127.0.0.1:{free_port()}",  # no learner: sends wait
    }
    healthz = f"http://127.0.0.1:{port}/healthz?stalled_after={STALLED_AFTER_S}"
    probe_env = {k: v for k, v in env.items() if k.startswith("PPOMQ_")} | {"PATH": ""}

    def probe(*limit: str) -> subprocess.CompletedProcess[str]:  # HEALTHCHECK's, compose's
        return subprocess.run(
            [sys.executable, "-m", "ppomq.healthcheck", "actor", *limit],
            env=probe_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    with open(log_path, "wb") as log:
        actor = subprocess.Popen(
            [sys.executable, "-m", "ppomq.cli", "actor"], env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    actor_log = log_path.read_text

    def running() -> None:
        assert actor.poll() is None, f"the actor exited ({actor.returncode}):\n{actor_log()}"

    try:
        wait_until(lambda: _get(healthz)[0] == 200, 60, "/healthz", check=running,
                   context=actor_log)  # fmt: skip
        # Waiting for its first weights, the loop turns (every 20 ms): healthy, however long.
        # Its warning comes once it has waited 10 s: five times the limit.
        wait_until(lambda: WAITING in actor_log(), 60, "the actor's still-waiting warning",
                   check=running, context=actor_log)  # fmt: skip
        status, body = _get(healthz)
        assert status == 200 and "ok:" in body, body
        res = probe("--stalled-after", str(STALLED_AFTER_S))
        assert res.returncode == 0, res.stdout

        # Weights arrive; its first env step never returns.
        _publish_first_weights(redis_url)
        wait_until(lambda: _get(healthz)[0] == 503, 60, "/healthz to say 503", check=running,
                   context=actor_log)  # fmt: skip
        assert "first env step" in actor_log()  # it is in the step, as meant
        status, body = _get(healthz)
        assert "not turned for" in body, body
        res = probe("--stalled-after", str(STALLED_AFTER_S))
        assert res.returncode == 1 and "503" in res.stdout, res.stdout
        assert actor.poll() is None  # stuck, not gone: only a liveness probe can tell
        assert _get(f"http://127.0.0.1:{port}/metrics")[0] == 200  # the old probe passed
        # The default limit (120 s, the image's HEALTHCHECK and k8s): a 3 s hang passes.
        assert probe().returncode == 0
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        actor.kill()
        actor.wait(timeout=10)
        server.stop()
