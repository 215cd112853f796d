"""--env-backend envpool without EnvPool: how a Gymnasium id maps to an EnvPool task, the
one-line errors, and the NEXT_STEP to SAME_STEP conversion on a scripted pool. EnvPool's
catalogue is a stand-in here (`envpool.list_all_envs` is all the mapping reads of it), so
these run where the envpool extra is not installed; test_envpool.py steps a real one."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

from ppomq.core.envs import make_vector_env
from ppomq.core.envs.envpool import EnvPoolVectorEnv, envpool_task
from ppomq.core.errors import UsageError

# Ids EnvPool 1.2.5 has, of those these tests map: its catalogue, as `list_all_envs` says it.
CATALOGUE = ["Pong-v5", "Breakout-v5", "HalfCheetah-v5", "Hopper-v5"]


@pytest.fixture
def catalogue(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An `envpool` module that has only `list_all_envs`: what the mapping reads."""
    names = list(CATALOGUE)
    stand_in = types.SimpleNamespace(list_all_envs=lambda: names)
    monkeypatch.setitem(sys.modules, "envpool", stand_in)
    return names


@pytest.fixture
def ale() -> None:
    ale_py = pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")
    import gymnasium as gym

    gym.register_envs(ale_py)


def test_a_mujoco_id_maps_to_the_same_task_with_no_options(catalogue):
    assert envpool_task("HalfCheetah-v5") == ("mujoco", "HalfCheetah-v5", {})


def test_atari_ids_map_to_the_game_with_deepminds_wrappers_and_their_sticky_actions(catalogue, ale):
    family, task, options = envpool_task("ALE/Pong-v5")
    assert (family, task) == ("atari", "Pong-v5")
    assert options["repeat_action_probability"] == 0.25  # v5: sticky
    assert (options["frame_skip"], options["noop_max"], options["stack_num"]) == (4, 30, 4)
    assert options["episodic_life"] and options["reward_clip"] and options["use_fire_reset"]
    family, task, options = envpool_task("BreakoutNoFrameskip-v4")
    assert (family, task, options["repeat_action_probability"]) == ("atari", "Breakout-v5", 0.0)


def test_an_id_envpool_lacks_or_a_family_it_does_not_cover_is_one_line(catalogue):
    with pytest.raises(UsageError, match=r"--env-backend gymnasium") as err:
        make_vector_env("CartPole-v1", 1, [1], backend="envpool")
    assert "\n" not in str(err.value) and "Atari and MuJoCo" in str(err.value)
    catalogue.remove("HalfCheetah-v5")
    with pytest.raises(UsageError, match=r"EnvPool has no .*--env-backend gymnasium") as err:
        make_vector_env("HalfCheetah-v5", 1, [1], backend="envpool")
    assert "\n" not in str(err.value)


def test_envpool_not_installed_is_one_line_naming_the_extra_and_the_fallback():
    code = (
        "import sys\nsys.modules['envpool'] = None\n"
        "from ppomq.core.envs import make_vector_env\nfrom ppomq.core.errors import UsageError\n"
        "try:\n    make_vector_env('HalfCheetah-v5', 1, [1], backend='envpool')\n"
        "except UsageError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1, out.stdout
    assert "pip install -e '.[envpool]'" in out.stdout
    assert "--env-backend gymnasium" in out.stdout


# `ppomq actor` with a stand-in catalogue, so that the family is what it stops on.
ACTOR_WITH_A_CATALOGUE = f"""
import sys, types
sys.modules["envpool"] = types.SimpleNamespace(list_all_envs=lambda: {CATALOGUE!r})
from ppomq.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_actor_exits_2_with_one_line_for_an_id_envpool_does_not_cover():
    out = subprocess.run(
        [sys.executable, "-c", ACTOR_WITH_A_CATALOGUE, "actor", "--env-id", "CartPole-v1",
         "--env-backend", "envpool", "--learner-addr", "tcp://127.0.0.1:9",
         "--weightserver-addr", "tcp://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "Atari and MuJoCo" in lines[0] and "--env-backend gymnasium" in lines[0]


class _StubPool:
    """EnvPool's gymnasium NEXT_STEP interface for 2 envs, scripted: env 0 loses its last
    life at step 3 after scoring raw 4 (clipped 1) and raw 7 (clipped 1)."""

    def __init__(self) -> None:
        self.t = 0
        self.resets: list[list[int]] = []

    def reset(self, env_id):
        return np.zeros((2, 1), np.uint8), {"env_id": np.asarray(env_id)}

    def step(self, action, env_id=None):
        if env_id is not None:  # the reset step of the ended envs
            self.resets.append(list(env_id))
            k = len(env_id)
            info = {"env_id": np.asarray(env_id), "reward": np.zeros(k), "lives": np.full(k, 5)}
            return np.full((k, 1), 99, np.uint8), np.zeros(k), *([np.zeros(k, bool)] * 2), info
        self.t += 1
        raw = {1: [4.0, 0.0], 2: [7.0, 1.0], 3: [0.0, 0.0]}.get(self.t, [0.0, 0.0])
        lives = np.array([0 if self.t == 3 else 1, 3])
        term = np.array([self.t == 3, False])
        info = {"env_id": np.arange(2), "reward": np.array(raw), "lives": lives}
        obs = np.full((2, 1), self.t, np.uint8)
        return obs, np.sign(raw), term, np.zeros(2, bool), info

    def close(self) -> None:
        pass


def test_game_returns_are_summed_from_the_raw_rewards_and_reset_in_the_same_step():
    envs = EnvPoolVectorEnv.__new__(EnvPoolVectorEnv)
    envs.pool, envs.num_envs, envs.atari, envs._all = _StubPool(), 2, True, np.arange(2)
    envs._game_return, envs._game_length = np.zeros(2), np.zeros(2, np.int64)
    envs.reset()
    for _ in range(2):
        info = envs.step(np.zeros(2, np.int64))[4]
        assert "final_info" not in info
    obs, reward, term, _, info = envs.step(np.zeros(2, np.int64))
    assert reward.tolist() == [0.0, 0.0] and term.tolist() == [True, False]
    assert envs.pool.resets == [[0]]
    assert obs[0, 0] == 99 and obs[1, 0] == 3  # env 0's reset obs, env 1 goes on
    assert info["final_obs"][0][0] == 3 and info["_final_obs"].tolist() == [True, False]
    ep = info["final_info"]
    assert ep["_episode"].tolist() == [True, False]
    assert ep["episode"]["r"][0] == 11.0 and ep["episode"]["l"][0] == 3  # raw, not clipped 2
