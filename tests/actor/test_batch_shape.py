"""An actor whose --num-steps differs from the learner's stops at its first weights with
the setting to change, instead of having every batch refused forever."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis
import torch

from ppomq.actor.batch_shape import check_num_steps
from ppomq.core.errors import UsageError
from ppomq.core.models import build_model, numpy_state
from ppomq.core.store.weight_store import WeightStore
from ppomq.proto.weights_blob import pack_weights

from ..support.ports import free_port
from ..weightserver.helpers import WeightserverProcess

CARTPOLE = {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
            "hidden": [16, 16], "activation": "tanh"}  # fmt: skip


def test_the_learners_num_steps_is_ours_or_unsaid_or_not_a_count():
    check_num_steps({"num_steps": 32}, 32)
    check_num_steps({}, 32)  # a learner that does not say
    for bad in (0, -1, "32", True, 2.0):
        check_num_steps({"num_steps": bad}, 32)


def test_another_num_steps_names_the_setting_to_change():
    with pytest.raises(UsageError, match=r"set --num-steps 32 \(PPOMQ_NUM_STEPS\)") as err:
        check_num_steps({"num_steps": 32}, 64)
    assert "\n" not in str(err.value)


@pytest.fixture
def server(redis_url: str) -> Iterator[WeightserverProcess]:
    proc = WeightserverProcess(redis_url, "shape")
    yield proc
    proc.stop()


def test_an_actor_set_to_another_num_steps_exits_2_at_its_first_weights(
    server: WeightserverProcess, redis_client: redis.Redis
):
    torch.manual_seed(0)
    policy = build_model(CARTPOLE)
    WeightStore(redis_client, "shape").publish(*pack_weights(
        1, numpy_state(policy), model=policy.spec, learner_step=1, env_steps=0,
        actor={"batches_per_version": 1, "num_steps": 32},
    ))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "actor", "--env-id", "CartPole-v1",
         "--num-envs", "2", "--num-steps", "64", "--run-id", "shape",
         "--weightserver-addr", server.endpoint,
         "--learner-addr", f"tcp://127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-1500:]
    errors = [ln for ln in done.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "set --num-steps 32" in errors[0], done.stderr[-1500:]
    assert "Traceback" not in done.stderr
