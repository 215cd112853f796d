"""PufferLib's C CartPole (Ocean's puffer_cartpole) as a Gymnasium env, so that unchanged
ppomq trains it: `ppomq train --env-id benchmarks.contenders.puffer_cartpole_env:PufferCartPole-v0`
(the repository root on PYTHONPATH).

Each env is one Ocean env, stepped by one C call (`env_step`) into buffers this object
owns. The C extension is PufferLib 3.0.0's own `binding.c` for cartpole, compiled for this
venv's Python and NumPy by `bash benchmarks/contenders/puffer_setup.sh` (PufferLib's wheel
is built against NumPy 1.x and cannot load under NumPy 2). Where it is: $PPOMQ_PUFFER_BINDING,
else VENV/ppomq-ocean/cartpole/ under $PPOMQ_PUFFER_VENV (default: .venv-puffer at the
repository root).

How Ocean's CartPole differs from Gymnasium's, and what this shim does about it:

* It resets inside `step()`: the observation an episode ended on is overwritten by the next
  episode's first one. The shim rebuilds it from the state before the step and the action
  (one step of the same physics in float32; the state is the observation), returns it as
  the step's observation, and hands the new episode's first observation out at the
  `reset()` that Gymnasium's vector env calls next, without resetting the C env again.
* It ends an episode at 200 steps with no flag at all (its truncation buffer is never
  written), with reward 0 on that step. The shim counts steps and reports truncated=True
  at step 200 (unless the pole fell on that very step: terminated), so ppomq bootstraps
  from the rebuilt final observation. PufferLib's own trainer sees no end there.
* Its reward is 0 on the step an episode ends (terminated or truncated), 1 otherwise, so
  a return is the episode's length minus one; PufferLib's `score` is the length.
* All envs of a process share one random stream (libc `rand()`, which Ocean's resets
  draw from): `reset(seed=s)` re-creates the C env, which calls `srand(s)`, so the first
  start state is the seed's, and later ones come from the one stream of the process.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

ENV_ID = "PufferCartPole-v0"
MAX_STEPS = 200  # cartpole.h MAX_STEPS
REPO = Path(__file__).resolve().parents[2]
INSTALL = "bash benchmarks/contenders/puffer_setup.sh"

# cartpole.h's constants, as float32 as the C code computes with them.
_F = np.float32
GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = (
    _F(9.8), _F(1.0), _F(0.1), _F(0.5), _F(10.0), _F(0.02),
)  # fmt: skip
TOTAL_MASS = MASSPOLE + MASSCART
POLEMASS_LENGTH = MASSPOLE * LENGTH
FOUR_THIRDS = _F(4.0) / _F(3.0)

_binding: Any = None


def binding_path() -> Path:
    """Where the cartpole binding built for this interpreter is expected."""
    given = os.environ.get("PPOMQ_PUFFER_BINDING")
    if given:
        return Path(given)
    venv = Path(os.environ.get("PPOMQ_PUFFER_VENV", REPO / ".venv-puffer"))
    return venv / "ppomq-ocean" / "cartpole" / f"binding{sysconfig.get_config_var('EXT_SUFFIX')}"


def load_binding() -> Any:
    """PufferLib's cartpole binding, loaded once per process; a missing one is a one-line
    error naming the setup script."""
    global _binding
    if _binding is None:
        path = binding_path()
        if not path.is_file():
            raise gym.error.DependencyNotInstalled(
                f"PufferLib's cartpole binding is not built for this venv ({path}): run {INSTALL}"
            )
        spec = importlib.util.spec_from_file_location("binding", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _binding = module
    return _binding


def physics_step(state: np.ndarray, action: Any) -> np.ndarray:
    """cartpole.h's `c_step` dynamics in float32: the state(s) [..., 4] one step on."""
    x, x_dot, theta, theta_dot = np.moveaxis(np.asarray(state, dtype=np.float32), -1, 0)
    force = np.where(np.asarray(action) > 0.5, FORCE_MAG, -FORCE_MAG).astype(np.float32)
    costheta, sintheta = np.cos(theta), np.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot * theta_dot * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (FOUR_THIRDS - MASSPOLE * costheta * costheta / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    return np.stack(
        [x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc],
        axis=-1,
    ).astype(np.float32, copy=False)


class PufferCartPole(gym.Env):
    """One Ocean CartPole env behind Gymnasium's API (see the module's docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        # The C env reads and writes these buffers in place.
        self._obs = np.zeros((1, 4), dtype=np.float32)
        self._act = np.zeros(1, dtype=np.float32)
        self._rew = np.zeros(1, dtype=np.float32)
        self._term = np.zeros(1, dtype=np.uint8)
        self._trunc = np.zeros(1, dtype=np.uint8)
        self._handle: int | None = None
        self._t = 0  # steps into the episode, as the C env's `tick`
        self._reset_inside_step = False  # the C env already started the next episode

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        super().reset(seed=seed)
        b = load_binding()
        if seed is not None or self._handle is None:
            if self._handle is not None:
                b.env_close(self._handle)
            c_seed = int(seed if seed is not None else self.np_random.integers(2**31))
            self._handle = b.env_init(
                self._obs, self._act, self._rew, self._term, self._trunc, c_seed % 2**31,
                continuous=0,
            )  # fmt: skip
            b.env_reset(self._handle, 0)
        elif not self._reset_inside_step:
            b.env_reset(self._handle, 0)
        self._reset_inside_step = False
        self._t = 0
        return self._obs[0].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        before = self._obs[0].copy()  # the state: the C env may overwrite it with a reset
        self._act[0] = action
        load_binding().env_step(self._handle)
        self._t += 1
        terminated = bool(self._term[0])
        truncated = not terminated and self._t >= MAX_STEPS
        if terminated or truncated:
            # The C env has reset itself: rebuild the observation the episode ended on.
            self._reset_inside_step = True
            final = physics_step(before, float(action))
            return final, float(self._rew[0]), terminated, truncated, {}
        return self._obs[0].copy(), float(self._rew[0]), False, False, {}

    def close(self) -> None:
        if self._handle is not None and _binding is not None:
            _binding.env_close(self._handle)
            self._handle = None


class PufferCartPoleVector(gym.vector.VectorEnv):
    """N Ocean CartPoles stepped by one C call (`vec_step`), as PufferLib steps them: the
    vector env PufferCartPole-v0 registers as its vector_entry_point, which ppomq's actor
    steps with `--vectorization vector_entry_point`. Gymnasium's interface with same-step
    autoreset (a finished env's next first observation in `obs`, the one it ended on in
    info["final_obs"]) and the same episode ends as PufferCartPole. The C envs are seeded
    by PufferLib's rule (env i with i + seed x N, one random stream per process) from the
    first seed given."""

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        b = load_binding()
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._obs = np.zeros((num_envs, 4), dtype=np.float32)
        self._act = np.zeros(num_envs, dtype=np.float32)
        self._rew = np.zeros(num_envs, dtype=np.float32)
        self._term = np.zeros(num_envs, dtype=np.uint8)
        self._trunc = np.zeros(num_envs, dtype=np.uint8)
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._seed = seed
        self._handle = b.vec_init(
            self._obs, self._act, self._rew, self._term, self._trunc, num_envs, seed,
            continuous=0,
        )  # fmt: skip

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict]:
        if seed is not None:  # one stream per process: the first seed of a list seeds it
            self._seed = int(seed[0] if isinstance(seed, list) else seed) % 10_000
        load_binding().vec_reset(self._handle, self._seed)
        self._t[:] = 0
        return self._obs.copy(), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        before = self._obs.copy()
        self._act[:] = actions
        load_binding().vec_step(self._handle)
        self._t += 1
        terminated = self._term.astype(bool)
        truncated = ~terminated & (self._t >= MAX_STEPS)
        done = terminated | truncated
        info: dict[str, Any] = {}
        if done.any():
            self._t[done] = 0
            final = np.zeros_like(before)
            final[done] = physics_step(before[done], self._act[done])
            info = {"final_obs": final, "_final_obs": done}
        return self._obs.copy(), self._rew.copy(), terminated, truncated, info

    def close(self) -> None:
        if self._handle is not None:
            load_binding().vec_close(self._handle)
            self._handle = None


if ENV_ID not in gym.envs.registry:
    gym.register(id=ENV_ID, entry_point=PufferCartPole, vector_entry_point=PufferCartPoleVector)
