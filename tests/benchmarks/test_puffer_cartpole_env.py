"""benchmarks/contenders/puffer_cartpole_env.py: PufferLib's C CartPole behind Gymnasium's
API, with the episode ends Ocean hides reported (skipped where its binding is not built)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.contenders import puffer_cartpole_env as shim

pytestmark = pytest.mark.skipif(
    not shim.binding_path().is_file(),
    reason=f"PufferLib's cartpole binding is not built ({shim.binding_path()}): "
    "bash benchmarks/contenders/puffer_setup.sh",
)


def _balance(obs: np.ndarray) -> int:
    return int(obs[2] + 0.5 * obs[3] > 0)


def test_a_balanced_pole_is_truncated_at_200_with_its_own_final_observation() -> None:
    env = shim.PufferCartPole()
    obs, _ = env.reset(seed=5)
    for t in range(1, 201):
        before = obs
        obs, reward, terminated, truncated, _ = env.step(_balance(obs))
        if t < 200:
            assert (reward, terminated, truncated) == (1.0, False, False)
    assert (terminated, truncated, reward) == (False, True, 0.0)
    # The final observation is the state one step on from the last, not a new start.
    np.testing.assert_allclose(obs, shim.physics_step(before, _balance(before)), atol=1e-6)
    start, _ = env.reset()
    assert np.abs(start).max() <= 0.04  # the C env's own reset, not another one
    env.close()


def test_the_rebuilt_physics_is_the_c_envs_to_float32_rounding() -> None:
    env = shim.PufferCartPole()
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        action = int(rng.integers(2))
        expected = shim.physics_step(obs, action)
        obs, _, terminated, truncated, _ = env.step(action)
        np.testing.assert_allclose(obs, expected, atol=1e-6)
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()


def test_a_fall_is_terminated_with_reward_0_and_the_next_start_comes_from_reset() -> None:
    env = shim.PufferCartPole()
    env.reset(seed=7)
    for t in range(1, 200):  # noqa: B007 (t is read after the loop)
        obs, reward, terminated, truncated, _ = env.step(1)  # always push right: it falls
        if terminated:
            break
    assert terminated and not truncated and reward == 0.0 and t < 200
    assert abs(obs[2]) > 12 * 2 * np.pi / 360 or abs(obs[0]) > 2.4  # the state it fell in
    start, _ = env.reset()
    assert np.abs(start).max() <= 0.04


def test_seeded_resets_repeat_their_start() -> None:
    a, b = shim.PufferCartPole(), shim.PufferCartPole()
    np.testing.assert_array_equal(a.reset(seed=11)[0], b.reset(seed=11)[0])
    assert not np.array_equal(a.reset(seed=11)[0], a.reset(seed=12)[0])


def test_the_vector_form_reports_the_same_ends_with_one_c_call_a_step() -> None:
    n = 64
    envs = shim.PufferCartPoleVector(n, seed=2)
    obs, _ = envs.reset()
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(450):
        before = obs
        actions = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
        actions[: n // 2] = 1  # half of them fall
        obs, reward, terminated, truncated, info = envs.step(actions)
        done = terminated | truncated
        assert not (terminated & truncated).any()
        assert (reward[done] == 0.0).all() and (reward[~done] == 1.0).all()
        if done.any():
            assert (info["_final_obs"] == done).all()
            np.testing.assert_allclose(
                info["final_obs"][done], shim.physics_step(before[done], actions[done]), atol=1e-6
            )
            assert np.abs(obs[done]).max() <= 0.04  # their next episodes' first states
        np.testing.assert_allclose(
            obs[~done], shim.physics_step(before[~done], actions[~done]), atol=1e-6
        )
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int(truncated.sum())
    envs.close()
    assert ends["terminated"] > 0 and ends["truncated"] > 0


def test_vector_entry_point_vectorization_steps_the_shims_c_vector() -> None:
    from ppomq.core.envs import make_vector_env, rollout_spec_for

    env_id = f"benchmarks.contenders.puffer_cartpole_env:{shim.ENV_ID}"
    spec = rollout_spec_for(env_id, run_id="r", num_steps=4, max_bytes=1 << 20)
    assert spec.obs_shape == (4,) and spec.action.n == 2  # the single env's spaces
    envs = make_vector_env(env_id, 8, list(range(8)), "vector_entry_point", "gymnasium")
    assert isinstance(envs, shim.PufferCartPoleVector) and envs.num_envs == 8
    envs.close()
    other = make_vector_env(env_id, 2, [0, 1], "sync", "gymnasium")
    assert not isinstance(other, shim.PufferCartPoleVector)
    other.close()
