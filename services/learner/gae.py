"""Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438), in numpy.

A pure function over one rollout batch of T steps of N envs, with gymnasium's split of
episode ends into `terminated` (the MDP ended: the next value is 0) and `truncated` (a time
limit cut the episode: the next value is the value of the final observation, which the
actor computed because obs[t + 1] already belongs to the next episode). Treating a time
limit as a terminal state biases the value target (Pardo et al. 2018, "Time Limits in
Reinforcement Learning", arXiv:1712.00378), which CleanRL's ppo.py accepts for brevity
(`next_done = terminations | truncations`). The recursion itself is CleanRL's, i.e. detail
#5 of "The 37 Implementation Details of PPO" (Huang et al. 2022).
"""

from __future__ import annotations

import numpy as np

__all__ = ["compute_gae"]


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    final_values: np.ndarray,
    bootstrap_value: np.ndarray,
    *,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (advantages, returns), both [T, N] float32, with returns = advantages + values.

    Step t: the policy saw obs[t], whose value is values[t], acted, and got rewards[t].

    - terminated[t]: the episode ended at t by the MDP; no bootstrap.
    - truncated[t]: the episode was cut at t by a time limit; bootstrap from
      final_values[t], and do not carry the advantage back across the boundary.
    - otherwise the next value is values[t + 1], or bootstrap_value at t = T - 1.

    If both flags are set at a step, terminated wins (the MDP's end is the stronger fact).
    final_values is read only where truncated, and bootstrap_value only where the last step
    did not end, so the actor may leave NaN (or anything) in the unused entries.

        delta_t = r_t + gamma * next_value_t * (1 - terminated_t) - values_t
        A_t     = delta_t + gamma * lam * (1 - (terminated_t | truncated_t)) * A_{t+1}

    lam = 1 gives discounted returns minus values (Monte Carlo with a bootstrap), lam = 0
    gives the one-step TD error (Schulman et al. 2016, eqs. 17-18). The inputs are not
    modified.
    """
    if values.ndim != 2:
        raise ValueError(f"values must be [T, N], got shape {values.shape}")
    num_steps, num_envs = values.shape
    for name, arr in (
        ("rewards", rewards),
        ("terminated", terminated),
        ("truncated", truncated),
        ("final_values", final_values),
    ):
        if arr.shape != values.shape:
            raise ValueError(f"{name} has shape {arr.shape}, values has {values.shape}")
    if bootstrap_value.shape != (num_envs,):
        raise ValueError(f"bootstrap_value must be [{num_envs}], got {bootstrap_value.shape}")

    # Two outputs and one [T, N] coefficient array are the only big allocations: the deltas
    # are built in place inside `advantages`, whose rows are then accumulated in place.
    advantages = np.empty((num_steps, num_envs), dtype=np.float32)  # [T, N]
    returns = np.empty((num_steps, num_envs), dtype=np.float32)  # [T, N]
    if num_steps == 0:
        return advantages, returns

    # next_value[t]: values shifted one step back in time, with the batch's bootstrap at the
    # end.  copyto (not multiply by a mask) so that NaN in unused entries cannot leak.
    next_value = advantages  # [T, N], reused as the delta and then the advantage buffer
    next_value[:-1] = values[1:]  # obs[t + 1] -> step t
    next_value[-1] = bootstrap_value
    np.copyto(next_value, final_values, where=truncated)
    np.copyto(next_value, np.float32(0.0), where=terminated)

    # delta = r + gamma * next_value - v, in place.
    np.multiply(next_value, np.float32(gamma), out=next_value)
    np.add(next_value, rewards, out=next_value)
    np.subtract(next_value, values, out=next_value)

    # carry[t] = gamma * lam where the episode goes on after t, else 0: the advantage of a
    # new episode must not flow back into the one that ended (terminated or truncated).
    ended = np.logical_or(terminated, truncated)  # [T, N] bool
    carry = np.where(ended, np.float32(0.0), np.float32(gamma * lam))  # [T, N] float32

    # Reverse recursion; A_{T-1} = delta_{T-1} since the bootstrap already sits in the delta.
    scratch = np.empty(num_envs, dtype=np.float32)  # [N]
    for t in range(num_steps - 2, -1, -1):
        np.multiply(carry[t], advantages[t + 1], out=scratch)
        np.add(advantages[t], scratch, out=advantages[t])

    np.add(advantages, values, out=returns)
    return advantages, returns
