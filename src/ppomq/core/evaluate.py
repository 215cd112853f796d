"""Greedy evaluation of a policy, and loading one from a run dir or a weights file."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ppomq.core.errors import NotFoundError, UsageError
from ppomq.core.models import ModelSpecError, Policy, build_model
from ppomq.core.safe_load import load_plain


def check_fits_env(model: dict[str, Any], env_id: str, obs_space: Any, action_space: Any) -> None:
    """A one-line UsageError when a model (its spec, and with it its normalization
    statistics) was not made for this env's spaces."""
    obs_shape = tuple(getattr(obs_space, "shape", None) or ())
    if list(obs_shape) != list(model["obs_shape"]):
        raise UsageError(
            f"the weights are for observations of shape {tuple(model['obs_shape'])} (their "
            f"normalization statistics too), {env_id} has {obs_shape}; pass the env they "
            "were trained on (--env-id)"
        )
    action = model["action"]
    n = getattr(action_space, "n", None)
    fits = (
        n is not None and int(n) == action.get("n")
        if action["kind"] == "categorical"
        else list(getattr(action_space, "shape", None) or ()) == list(action.get("shape", []))
    )
    if not fits:
        raise UsageError(
            f"the weights' action head ({action}) does not fit {env_id}'s action space "
            f"{action_space}; pass the env they were trained on (--env-id)"
        )


@dataclass(frozen=True)
class Evaluation:
    """What a greedy evaluation measured: the mean return of the episodes it finished
    (None when none finished in its time bound), how many, in how many env steps and
    seconds, and whether the time bound cut it short."""

    mean_return: float | None
    episodes: int
    episodes_asked: int
    steps: int
    seconds: float
    cut_short: bool


def evaluate_policy(
    policy: Policy,
    env_id: str,
    *,
    episodes: int = 20,
    seed: int = 0,
    time_limit_s: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Evaluation:
    """`episodes` greedy episodes (one env, seeded per episode); Gaussian actions are the
    mean, clipped to the env's bounds per dimension. With `time_limit_s` > 0 it stops once
    that much time has passed, and the mean is over the episodes finished by then (a
    greedy policy can play one game for minutes: Pong's, or Breakout's that never serves).
    `progress` is called after every env step with (episodes finished, env steps taken)."""
    from ppomq.core.envs import check_env_id, make_env

    check_env_id(env_id)
    env = make_env(env_id)
    space = env.action_space
    check_fits_env(policy.spec, env_id, env.observation_space, space)
    fast = policy.inference()  # the actors' numpy path: no module calls per env step
    recurrent = bool(getattr(fast, "recurrent", False))
    returns: list[float] = []
    steps = 0
    start = clock()
    deadline = start + time_limit_s if time_limit_s > 0 else float("inf")
    cut_short = False
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            if recurrent:  # each episode from a zero state, carried from step to step
                state, starts = fast.initial_state(1), np.zeros(1, dtype=bool)
            done = False
            total = 0.0
            while not done:
                if clock() >= deadline:
                    cut_short = True
                    break
                if recurrent:
                    greedy, state = fast.greedy(np.asarray(obs)[None], starts, state)
                    action = greedy[0]
                else:
                    action = fast.greedy(np.asarray(obs)[None])[0]
                action = int(action) if policy.discrete else np.clip(action, space.low, space.high)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
                steps += 1
                if progress is not None:
                    progress(ep + int(done), steps)
            if cut_short:
                break
            returns.append(total)
    finally:
        env.close()
    return Evaluation(
        mean_return=sum(returns) / len(returns) if returns else None,
        episodes=len(returns),
        episodes_asked=episodes,
        steps=steps,
        seconds=clock() - start,
        cut_short=cut_short,
    )


def load_weights_file(path: str | Path) -> tuple[Policy, dict[str, Any]]:
    """A policy from a `final_weights.pt` or a `ppomq weights export` file.

    Read with `weights_only=True`: those files hold only tensors and plain containers, and
    a file that needs more of pickle (which can run any code as it loads) is refused."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"weights file {path} not found; check the path")
    use = "use a run dir's final_weights.pt or a file from `ppomq weights export`"
    doc = load_plain(path, what="a ppomq weights file", fix=use)
    try:
        meta = dict(doc["metadata"])
        # Exported versions carry the env in the header's `extra`; run dirs at top level.
        meta.setdefault("env_id", meta.get("extra", {}).get("env_id"))
        policy = build_model(meta["model"])
        policy.load_state_dict({k: torch.as_tensor(v) for k, v in doc["state_dict"].items()})
    except ModelSpecError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, RuntimeError) as exc:
        raise UsageError(
            f"{path} is not a ppomq weights file ({type(exc).__name__}); {use}"
        ) from None
    return policy, meta
