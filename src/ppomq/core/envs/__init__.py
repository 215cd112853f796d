"""Gymnasium env factory and the mapping from env spaces to the wire's RolloutSpec."""

from __future__ import annotations

from typing import Any

import numpy as np

from ppomq.core.errors import UsageError, install_hint
from ppomq.proto import ActionSpace, RolloutSpec

#: An env's metadata key: the env reports its episodes (whole games with raw scores) in
#: info["episode"] (Gymnasium's RecordEpisodeStatistics), and its own done flags and rewards
#: are not what is to be reported (ppomq.core.envs.atari's training pipeline sets it).
EPISODES_IN_INFO = "ppomq.episodes_in_info"


def env_seed(run_seed: int, actor_index: int, env_index: int) -> int:
    """Decorrelated per-env seed: one SeedSequence over (run seed, actor, env)."""
    return int(np.random.SeedSequence([run_seed, actor_index, env_index]).generate_state(1)[0])


def check_env_id(env_id: str) -> None:
    """Fail with a one-line fix for an env id Gymnasium does not know."""
    import importlib

    import gymnasium as gym

    # Gymnasium's "module:EnvId" syntax (gym.make imports `module` first): import it here
    # too, so that envs registered on import pass this check in every process.
    module, _, env_id = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise UsageError(
                f"cannot import {module!r} for env id {module}:{env_id} ({exc}); "
                "check the module name and that it is on PYTHONPATH"
            ) from None
    if env_id not in gym.envs.registry:
        _register_lazily(env_id)
    if env_id not in gym.envs.registry:
        close = [k for k in gym.envs.registry if k.lower().startswith(env_id.split("-")[0].lower())]
        hint = f" Did you mean {', '.join(sorted(close)[:3])}?" if close else ""
        raise UsageError(
            f"unknown env id {env_id!r}: not registered with Gymnasium.{hint} "
            "Pass --env-id with an id from gymnasium.envs.registry, or MODULE:EnvId for an "
            "env that your module registers when imported (e.g. my_envs:Maze-v0)."
        )


def make_vector_env(
    env_id: str,
    num_envs: int,
    seeds: list[int],
    vectorization: str = "sync",
    backend: str = "gymnasium",
) -> Any:
    """N copies of `env_id`, autoresetting in the same step (final obs in info), stepped by
    Gymnasium (`vectorization` sync or async), by the env's own vector implementation
    (`vectorization` vector_entry_point: what the id registers as its vector_entry_point,
    such as N envs stepped by one C call), by EnvPool (ppomq.core.envs.envpool: Atari and
    MuJoCo ids, in EnvPool's own threads) or by ale-py's C++ AtariVectorEnv
    (ppomq.core.envs.ale_vector: Atari ids); `vectorization` applies to Gymnasium only."""
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    check_env_id(env_id)
    if backend == "envpool":
        from ppomq.core.envs.envpool import make_envpool

        return make_envpool(env_id.rpartition(":")[2], num_envs, seeds)
    if backend == "ale":
        from ppomq.core.envs.ale_vector import make_ale_vector

        return make_ale_vector(env_id.rpartition(":")[2], num_envs, seeds)
    if vectorization == "vector_entry_point":
        return _make_own_vector_env(env_id, num_envs, seeds)
    # The passive env checker only inspects the first calls but stays a wrapper layer on
    # every step; ppomq validates what leaves the actor instead.
    fns = [
        lambda: make_env(env_id, training=True, disable_env_checker=True) for _ in range(num_envs)
    ]
    # SAME_STEP: a finished env is reset inside step(), and its final observation comes back
    # in info["final_obs"], which truncation bootstrapping needs.
    if vectorization == "async":
        envs = AsyncVectorEnv(
            fns, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn", copy=False
        )
    else:
        # copy=False: the runner copies each observation into its rollout buffer at once.
        envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, copy=False)
    envs.reset(seed=seeds)
    envs.action_space.seed(seeds[0])
    return envs


def check_vector_entry_point(env_id: str) -> None:
    """Fail with a one-line fix where `env_id` cannot be stepped by `--vectorization
    vector_entry_point`: it registers no vector env, or one whose class says it autoresets
    otherwise than in the same step (a factory function is known only once built)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id.rpartition(":")[2]).vector_entry_point
    if entry is None:
        raise UsageError(
            f"{env_id} registers no vector_entry_point, which --vectorization "
            "vector_entry_point needs; register one with gymnasium.register(..., "
            "vector_entry_point=...) or pass --vectorization sync"
        )
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    if isinstance(creator, type):
        _check_same_step(env_id, getattr(creator, "metadata", None))


def _check_same_step(env_id: str, metadata: dict[str, Any] | None) -> None:
    from gymnasium.vector import AutoresetMode

    mode = (metadata or {}).get("autoreset_mode")
    if mode != AutoresetMode.SAME_STEP:
        raise UsageError(
            f"{env_id}'s vector env autoresets in mode {getattr(mode, 'value', mode)}, and "
            "ppomq needs same-step autoreset (metadata['autoreset_mode'] = "
            "AutoresetMode.SAME_STEP, the final observation in info['final_obs']); "
            "pass --vectorization sync"
        )


def _make_own_vector_env(env_id: str, num_envs: int, seeds: list[int]) -> Any:
    """The vector env `env_id` registers (gymnasium.register(..., vector_entry_point=...)),
    which must autoreset in the same step, as ppomq's runner reads its envs."""
    import gymnasium as gym

    check_vector_entry_point(env_id)
    name = env_id.rpartition(":")[2]
    try:
        envs = gym.make_vec(name, num_envs=num_envs, vectorization_mode="vector_entry_point")
    except gym.error.DependencyNotInstalled as exc:
        raise UsageError(f"{env_id} needs a package that is not installed: {exc}") from None
    try:
        _check_same_step(env_id, getattr(envs, "metadata", None))
    except UsageError:
        envs.close()
        raise
    envs.reset(seed=seeds)
    envs.action_space.seed(seeds[0])
    return envs


def _register_lazily(env_id: str) -> None:
    """Ids registered on first use, not at import (import time is start-up time): ppomq's
    own (ppomq.core.envs.memory), and ale-py's."""
    if env_id.rpartition(":")[2].startswith("ppomq/"):
        from ppomq.core.envs.memory import register_memory_envs

        register_memory_envs()
        return
    _register_atari(env_id)


def _register_atari(env_id: str) -> None:
    """Register ale-py's ids in this process (Gymnasium does not import ale-py itself); an
    Atari id without ale-py installed is a one-line UsageError naming the extra."""
    from ppomq.core.envs.atari import INSTALL, looks_atari, register_ale

    if not register_ale() and looks_atari(env_id.rpartition(":")[2]):
        raise UsageError(
            f"{env_id} needs a package that is not installed: ale-py, the Atari emulator "
            f"and its ROMs ({INSTALL})"
        )


def make_env(env_id: str, *, training: bool = False, **kwargs: Any) -> Any:
    """gym.make, with a missing optional dependency (MuJoCo, ale-py ...) said in one line
    naming the fix instead of Gymnasium's traceback. An Atari id gets ppomq.core.envs.atari's
    preprocessing; `training` adds what only training wants (episodic life, reward
    clipping) and is ignored by other envs."""
    import gymnasium as gym
    from gymnasium.error import DependencyNotInstalled

    if env_id not in gym.envs.registry:
        _register_lazily(env_id)  # spawned vector-env workers come here first
    try:
        from ppomq.core.envs.atari import is_atari, make_atari

        if is_atari(env_id):
            return make_atari(env_id, training=training, **kwargs)
        return gym.make(env_id, **kwargs)
    except DependencyNotInstalled as exc:
        text = str(exc).lower()
        extra = (
            f" ({install_hint('mujoco')})"
            if "mujoco" in text
            else f" ({install_hint('atari')})"
            if "opencv" in text or "ale_py" in text or "ale-py" in text
            else ""
        )
        raise UsageError(f"{env_id} needs a package that is not installed: {exc}{extra}") from None


def spaces_of(env_id: str) -> tuple[Any, Any]:
    """(observation space, action space) of one env, without keeping it; an observation
    space ppomq cannot train on is a one-line UsageError naming the fix."""
    check_env_id(env_id)
    from ppomq.core.envs.atari import atari_spaces, is_atari

    if is_atari(env_id):  # known without building the pipeline (and without OpenCV)
        obs_space, act_space = atari_spaces(env_id)
        check_obs_space(obs_space, env_id)
        return obs_space, act_space
    env = make_env(env_id)
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    check_obs_space(obs_space, env_id)
    return obs_space, act_space


def check_obs_space(obs_space: Any, env_id: str) -> None:
    """Models take one array per observation: a Box of rank >= 1 with at least one element
    (a vector, or an image such as Atari's uint8 (4, 84, 84) frame stack, channels first).
    Anything else (Dict, Tuple, Discrete, a scalar Box) flattens to one with Gymnasium's
    FlattenObservation; a Box with no elements no model can take."""
    from gymnasium import spaces

    if isinstance(obs_space, spaces.Box) and len(obs_space.shape) >= 1:
        if 0 in obs_space.shape:
            raise UsageError(
                f"{env_id} has Box observations of shape {tuple(obs_space.shape)}, which hold "
                "no elements; no ppomq model can take them: pass an env whose observations "
                "hold at least one element"
            )
        return
    what = "a scalar Box" if isinstance(obs_space, spaces.Box) else type(obs_space).__name__
    # The space's own repr is left out: a Box with per-element bounds prints on many lines.
    raise UsageError(
        f"{env_id} has {what} observations, which ppomq does not support (it trains on Box "
        "observations); wrap the env with gymnasium.wrappers.FlattenObservation, register "
        "the wrapped env and pass its id as --env-id module:NewEnv-v0"
    )


def wire_obs_dtype(obs_space: Any) -> str:
    """uint8 images stay uint8 on the wire (4x smaller); everything else is float32."""
    return "uint8" if obs_space.dtype == np.uint8 else "float32"


def action_space_of(action_space: Any) -> ActionSpace:
    """The wire's ActionSpace for a Discrete or Box space; a Box keeps one bound per element."""
    from gymnasium import spaces

    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise UsageError("Discrete action spaces must start at 0 for ppomq")
        return ActionSpace("discrete", n=int(action_space.n))
    if isinstance(action_space, spaces.Box):
        return ActionSpace.box(action_space.shape, action_space.low, action_space.high)
    raise UsageError(
        f"{type(action_space).__name__} action spaces are not supported; use an env with "
        "Discrete or Box actions"
    )


def rollout_spec_for(
    env_id: str, *, run_id: str, num_steps: int, max_bytes: int, num_envs: int | None = None
) -> RolloutSpec:
    """What the learner accepts for `env_id`: derived from the env's own spaces."""
    obs_space, act_space = spaces_of(env_id)
    return RolloutSpec(
        run_id=run_id,
        obs_shape=tuple(obs_space.shape),
        obs_dtype=wire_obs_dtype(obs_space),
        action=action_space_of(act_space),
        num_steps=num_steps,
        num_envs=num_envs,
        env_id=env_id,
        max_bytes=max_bytes,
    )
