"""Greedy evaluation of a policy, and loading one from a run dir or a weights file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .errors import NotFoundError, UsageError
from .policy import ActorCritic


def evaluate_policy(
    policy: ActorCritic, env_id: str, *, episodes: int = 20, seed: int = 0
) -> float:
    """Mean undiscounted return of `episodes` greedy episodes (one env, seeded per episode)."""
    import gymnasium as gym

    from .envs import check_env_id

    check_env_id(env_id)
    env = gym.make(env_id)
    space = env.action_space
    total = 0.0
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            done = False
            while not done:
                x = torch.as_tensor(np.asarray(obs, dtype=np.float32)).unsqueeze(0)
                action = policy.greedy(x)[0].numpy()
                if not policy.discrete:
                    action = np.clip(action, space.low, space.high)
                else:
                    action = int(action)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
    finally:
        env.close()
    return total / max(episodes, 1)


def load_weights_file(path: str | Path) -> tuple[ActorCritic, dict[str, Any]]:
    """A policy from a `final_weights.pt` or a `ppomq weights export` file."""
    path = Path(path)
    if not path.exists():
        raise NotFoundError(f"weights file {path} not found; check the path")
    try:
        doc = torch.load(path, map_location="cpu", weights_only=False)
        meta = dict(doc["metadata"])
        # Exported versions carry the env in the header's `extra`; run dirs at top level.
        meta.setdefault("env_id", meta.get("extra", {}).get("env_id"))
        model = meta["model"]
        policy = ActorCritic(model)
        policy.load_state_dict({k: torch.as_tensor(v) for k, v in doc["state_dict"].items()})
    except (KeyError, TypeError, RuntimeError, EOFError) as exc:
        raise UsageError(
            f"{path} is not a ppomq weights file ({type(exc).__name__}); use a run dir's "
            "final_weights.pt or a file from `ppomq weights export`"
        ) from None
    return policy, meta
