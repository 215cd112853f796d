"""WeightsPrefetcher against a real weightserver process and a real redis-server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest
import redis
import torch

from ppomq.actor.policy_sync import WeightsPrefetcher
from ppomq.core.models import InferencePolicy, ModelSpecError, Policy, build_model, numpy_state
from ppomq.core.store.weight_store import WeightStore
from ppomq.core.transport.weights_client import WeightsClient
from ppomq.proto.weights_blob import pack_weights

from ..weightserver.helpers import WeightserverProcess, make_weights

# With observation normalization: its statistics travel with the weights.
SPEC = {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
        "hidden": [16, 16], "activation": "tanh",
        "obs_norm": {"clip": 10.0, "epsilon": 1e-8}}  # fmt: skip
OBS = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)


@pytest.fixture
def server(redis_url: str) -> Iterator[WeightserverProcess]:
    proc = WeightserverProcess(redis_url, "pf")
    yield proc
    proc.stop()


@pytest.fixture
def prefetcher(server: WeightserverProcess) -> Iterator[WeightsPrefetcher]:
    p = WeightsPrefetcher(WeightsClient(server.endpoint, timeout_ms=5000), long_poll_ms=200)
    yield p
    p.close()


def _publish(store: WeightStore, version: int, seed: int) -> Policy:
    torch.manual_seed(seed)
    policy = build_model(SPEC)
    policy.obs_norm.update(torch.randn(64, 4, dtype=torch.float64) * seed + seed)
    actor = {"reward_norm": {"gamma": 0.99, "clip": 10.0, "epsilon": 1e-8}}
    store.publish(*pack_weights(version, numpy_state(policy), model=policy.spec,
                                learner_step=version, env_steps=0, actor=actor))  # fmt: skip
    return policy


def _values(policy: InferencePolicy) -> np.ndarray:
    return policy.value(OBS)


def test_newest_waits_for_a_version_and_loads_it(
    prefetcher: WeightsPrefetcher, redis_client: redis.Redis
) -> None:
    store = WeightStore(redis_client, "pf")
    assert prefetcher.newest(-1) is None  # nothing published (timeout_s 0: no wait)
    source = _publish(store, 1, seed=1)
    got = prefetcher.newest(-1, timeout_s=20)
    assert got is not None and got[0] == 1
    assert got[2] == {"reward_norm": {"gamma": 0.99, "clip": 10.0, "epsilon": 1e-8}}
    np.testing.assert_allclose(_values(got[1]), _values(source.inference()), rtol=1e-6)
    assert prefetcher.newest(1) is None  # nothing newer than what we hold


def test_a_newer_version_replaces_the_old_without_changing_a_policy_in_use(
    prefetcher: WeightsPrefetcher, redis_client: redis.Redis
) -> None:
    store = WeightStore(redis_client, "pf")
    _publish(store, 1, seed=1)
    got1 = prefetcher.newest(-1, timeout_s=20)
    assert got1 is not None
    before = _values(got1[1]).copy()
    source2 = _publish(store, 2, seed=2)
    got2 = prefetcher.newest(1, timeout_s=20)
    assert got2 is not None and got2[0] == 2
    np.testing.assert_allclose(_values(got2[1]), _values(source2.inference()), rtol=1e-6)
    np.testing.assert_array_equal(_values(got1[1]), before)  # v1's policy is untouched


def test_an_error_in_the_thread_reaches_the_caller(
    prefetcher: WeightsPrefetcher, redis_client: redis.Redis
) -> None:
    # Weights whose model spec no model can be built from (no obs_shape).
    WeightStore(redis_client, "pf").publish(*make_weights(1))
    with pytest.raises(ModelSpecError):
        prefetcher.newest(-1, timeout_s=20)


# Run as its own process: publishes weights of a large model, waits until the prefetch thread
# is inside the load (in torch), then closes the prefetcher and exits.
_EXIT_DURING_A_LOAD = """
import sys, threading
import redis, torch
from ppomq.actor import policy_sync as weights
from ppomq.core.models import build_model, numpy_state
from ppomq.proto.weights_blob import pack_weights
from ppomq.core.transport.weights_client import WeightsClient
from ppomq.core.store.weight_store import WeightStore

redis_url, endpoint, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
loading = threading.Event()
load = weights.PolicyHolder.load
def load_and_tell(self, *args):
    loading.set()
    load(self, *args)
weights.PolicyHolder.load = load_and_tell

spec = {"arch": "mlp", "obs_shape": [512], "action": {"kind": "categorical", "n": 2},
        "hidden": [1024, 1024], "activation": "tanh"}
prefetcher = weights.WeightsPrefetcher(WeightsClient(endpoint, timeout_ms=5000), long_poll_ms=200)
state = numpy_state(build_model(spec))
WeightStore(redis.Redis.from_url(redis_url), "pf").publish(*pack_weights(
    version, state, model=spec, learner_step=1, env_steps=0))
assert loading.wait(20), "the prefetcher never started loading"
prefetcher.close()
"""


def test_an_actor_that_stops_during_a_weights_load_exits_cleanly(
    server: WeightserverProcess, redis_url: str
) -> None:
    # A daemon thread still inside torch when the interpreter shuts down aborts the process
    # (exit -6), which is how a SIGTERM'd actor once died in CI.
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_DURING_A_LOAD, redis_url, server.endpoint, "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
