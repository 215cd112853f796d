"""Env spaces -> RolloutSpec: Box bounds kept per element; unsupported observations refused
in one line that names the fix, from the library call and from `ppomq train`."""

from __future__ import annotations

import math
import subprocess

import gymnasium as gym
import numpy as np
import pytest

from ppomq.core.envs import action_space_of, rollout_spec_for
from ppomq.core.errors import UsageError
from tests.e2e.cli import PPOMQ, clean_env


class _DictObsEnv(gym.Env):
    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1.0, 1.0, (2,)), "goal": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.Discrete(2)


class _NeedsMujocoEnv(gym.Env):
    """What a MuJoCo env does on a machine without the mujoco package."""

    def __init__(self, **kwargs):
        raise gym.error.DependencyNotInstalled(
            'MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`'
        )


class _ScalarObsEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (), np.float32)
    action_space = gym.spaces.Discrete(2)


for _id, _cls in (
    ("ppomq-test/DictObs-v0", _DictObsEnv),
    ("ppomq-test/ScalarObs-v0", _ScalarObsEnv),
    ("ppomq-test/NeedsMujoco-v0", _NeedsMujocoEnv),
):
    if _id not in gym.envs.registry:
        gym.register(_id, entry_point=_cls)


@pytest.mark.parametrize(
    "env_id,kind",
    [
        ("ppomq-test/DictObs-v0", "Dict"),
        ("Blackjack-v1", "Tuple"),
        ("FrozenLake-v1", "Discrete"),
        ("ppomq-test/ScalarObs-v0", "a scalar Box"),
    ],
)
def test_observations_other_than_a_box_are_a_one_line_usage_error_naming_the_fix(env_id, kind):
    with pytest.raises(UsageError) as err:
        rollout_spec_for(env_id, run_id="r", num_steps=8, max_bytes=1 << 20)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"{env_id} has {kind} observations" in msg and "not support" in msg
    assert "gymnasium.wrappers.FlattenObservation" in msg and "--env-id" in msg


def test_box_action_bounds_are_kept_per_element_in_c_order():
    low = np.array([[-1.0, -2.0], [-np.inf, 0.0]], np.float32)
    high = np.array([[1.0, 2.0], [np.inf, 0.5]], np.float32)
    space = action_space_of(gym.spaces.Box(low, high, dtype=np.float32))
    assert space.kind == "continuous" and space.shape == (2, 2)
    assert space.low == (-1.0, -2.0, -math.inf, 0.0)
    assert space.high == (1.0, 2.0, math.inf, 0.5)


def test_a_real_continuous_env_gets_its_own_bounds():
    spec = rollout_spec_for("MountainCarContinuous-v0", run_id="r", num_steps=8, max_bytes=1 << 20)
    assert spec.action.shape == (1,) and spec.action.low == (-1.0,) and spec.action.high == (1.0,)


@pytest.mark.slow
def test_train_on_unsupported_observations_exits_2_with_one_line(tmp_path):
    out = subprocess.run(
        [*PPOMQ, "train", "--env-id", "Blackjack-v1", "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr + out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "Tuple observations" in lines[0] and "FlattenObservation" in lines[0]


def test_a_missing_optional_dependency_is_one_line_naming_the_extra(tmp_path):
    with pytest.raises(UsageError, match=r"pip install -e '\.\[mujoco\]'") as err:
        rollout_spec_for("ppomq-test/NeedsMujoco-v0", run_id="r", num_steps=4, max_bytes=1 << 20)
    assert "\n" not in str(err.value)
    out = subprocess.run(
        [*PPOMQ, "train", "--env-id", "tests.core.envs.test_spaces:ppomq-test/NeedsMujoco-v0",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install -e '.[mujoco]'" in lines[0], out.stderr
    assert not (tmp_path / "run").exists()  # refused before anything started


def test_image_observations_pass_and_a_box_with_no_elements_is_one_line_naming_the_shape():
    from ppomq.core.envs import check_obs_space, wire_obs_dtype

    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # Atari's frame stack
    check_obs_space(frames, "ppomq-test/Frames-v0")
    assert wire_obs_dtype(frames) == "uint8"
    with pytest.raises(UsageError) as err:
        check_obs_space(gym.spaces.Box(0, 255, (4, 0, 84), np.uint8), "ppomq-test/Empty-v0")
    msg = str(err.value)
    assert "\n" not in msg and "(4, 0, 84)" in msg and "ppomq-test/Empty-v0" in msg
