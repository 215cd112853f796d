"""--vectorization vector_entry_point: the actor steps the vector env an id registers as
its own (N envs in one call), which must autoreset in the same step; ids without one, or
whose vector env autoresets in the next step, are a one-line error naming the fix."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import make_vector_env, rollout_spec_for
from ppomq.core.errors import UsageError
from ppomq.core.models import build_model, model_spec_for

OWN_VECTOR_ID = "ppomq-test/OwnVectorCartPole-v0"
MADE: list[object] = []  # every vector env the entry point built, to tell it was called


def own_vector_cartpole(num_envs: int, **kwargs: object) -> SyncVectorEnv:
    """A vector entry point: N CartPoles behind one object that autoresets in the same step."""
    envs = SyncVectorEnv(
        [lambda: gym.make("CartPole-v1") for _ in range(num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    MADE.append(envs)
    return envs


if OWN_VECTOR_ID not in gym.envs.registry:
    gym.register(
        id=OWN_VECTOR_ID,
        entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        vector_entry_point=own_vector_cartpole,
        max_episode_steps=500,
    )


def test_the_ids_own_vector_env_is_built_seeded_and_sampled_by_the_real_runner():
    n, t = 3, 40
    envs = make_vector_env(OWN_VECTOR_ID, n, [5, 6, 7], "vector_entry_point")
    assert envs is MADE[-1] and envs.num_envs == n
    again = make_vector_env(OWN_VECTOR_ID, n, [5, 6, 7], "vector_entry_point")
    first, _ = envs.reset()  # the runner's reset keeps the seeds' stream: equal seeds, equal
    np.testing.assert_array_equal(first, again.reset()[0])
    again.close()

    spec = rollout_spec_for(OWN_VECTOR_ID, run_id="r", num_steps=t, max_bytes=1 << 24)
    torch.manual_seed(0)
    policy = build_model(model_spec_for(spec, hidden=[8]))
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a0", env_id=OWN_VECTOR_ID)
    batch = runner.sample(policy.inference(), policy_version=0, seq=0)
    a = batch.arrays
    assert a["obs"].shape == (t, n, 4) and a["terminated"].any()  # random play falls in 40
    assert len(batch.episodes.lengths) == int(a["terminated"].sum() + a["truncated"].sum())
    envs.close()


def test_an_id_without_a_vector_entry_point_is_one_line_naming_the_fix():
    with pytest.raises(UsageError, match="registers no vector_entry_point") as err:
        make_vector_env("Acrobot-v1", 2, [0, 1], "vector_entry_point")
    assert "--vectorization sync" in str(err.value) and "\n" not in str(err.value)


def test_a_vector_env_that_autoresets_in_the_next_step_is_refused():
    # Gymnasium's own CartPoleVectorEnv starts the next episode one step after the last.
    with pytest.raises(UsageError, match="autoresets in mode NextStep") as err:
        make_vector_env("CartPole-v1", 2, [0, 1], "vector_entry_point")
    assert "same-step autoreset" in str(err.value)


def test_the_actor_exits_2_with_one_line_for_an_id_without_one():
    out = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "actor", "--env-id", "Acrobot-v1",
         "--vectorization", "vector_entry_point", "--learner-addr", "tcp://127.0.0.1:9",
         "--weightserver-addr", "tcp://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "registers no vector_entry_point" in lines[0], out.stderr


def test_train_refuses_before_starting_anything_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "train", "--env-id", "CartPole-v1",
         "--vectorization", "vector_entry_point", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "same-step autoreset" in lines[0], out.stderr
    assert not run_dir.exists()
