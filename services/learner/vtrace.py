"""V-trace targets (Espeholt et al. 2018, "IMPALA", arXiv:1802.01561, section 4.1), in numpy.

A pure function over one rollout batch of T steps of N envs, beside gae.py and with the same
episode-end semantics: `terminated` (the MDP ended: the next value is 0), `truncated` (a time
limit cut the episode: bootstrap from the value of the final observation) and neither (the
next value is the next step's, or the batch's bootstrap value after its last step). An
episode end stops the correction from flowing back into the episode before it.

The batch was collected by a behaviour policy mu (the actor's, `behaviour_logp`); the
targets are for the target policy pi (the learner's current one, `target_logp`), with
truncated importance weights rho_t = min(rho_bar, pi/mu) and c_t = min(c_bar, pi/mu):

    delta_t = rho_t * (r_t + gamma * V(x_{t+1}) - V(x_t))
    v_t     = V(x_t) + delta_t + gamma * c_t * (v_{t+1} - V(x_{t+1}))        (IMPALA eq. 1)
    A_t     = rho_t * (r_t + gamma * v_{t+1} - V(x_t))           (IMPALA section 4.2)

with v at the batch's end equal to V there (no correction beyond the batch). `A_t` is the
policy-gradient advantage; ppomq uses it in PPO's clipped surrogate, whose ratio is pi_theta
over the behaviour policy, as Sample Factory's APPO does (Petrenko et al. 2020, "Sample
Factory", arXiv:2006.11751; sample_factory/algo/learning/learner.py): the truncated weight
corrects the targets, the clip bounds the step.

On-policy (pi = mu, rho_bar >= 1, c_bar >= 1) every weight is 1 and v_t is the n-step
return bootstrapped at the batch's end: GAE's returns with lambda = 1
(tests/learner/test_vtrace.py checks both against a plain-loop reference).
"""

from __future__ import annotations

import numpy as np

__all__ = ["compute_vtrace"]


def compute_vtrace(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    final_values: np.ndarray,
    bootstrap_value: np.ndarray,
    behaviour_logp: np.ndarray,
    target_logp: np.ndarray,
    *,
    gamma: float,
    rho_bar: float,
    c_bar: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (advantages, value targets v), both [T, N] float32.

    `values` are V(x_t) under the value function being trained; final_values (read only
    where truncated) and bootstrap_value (read only where the last step did not end) are
    the values the actor computed for observations the batch does not carry. If both flags
    are set at a step, terminated wins. The inputs are not modified.
    """
    if values.ndim != 2:
        raise ValueError(f"values must be [T, N], got shape {values.shape}")
    num_steps, num_envs = values.shape
    for name, arr in (
        ("rewards", rewards),
        ("terminated", terminated),
        ("truncated", truncated),
        ("final_values", final_values),
        ("behaviour_logp", behaviour_logp),
        ("target_logp", target_logp),
    ):
        if arr.shape != values.shape:
            raise ValueError(f"{name} has shape {arr.shape}, values has {values.shape}")
    if bootstrap_value.shape != (num_envs,):
        raise ValueError(f"bootstrap_value must be [{num_envs}], got {bootstrap_value.shape}")
    if rho_bar <= 0 or c_bar <= 0:
        raise ValueError(f"rho_bar and c_bar must be > 0, got {rho_bar} and {c_bar}")

    advantages = np.empty((num_steps, num_envs), dtype=np.float32)
    targets = np.empty((num_steps, num_envs), dtype=np.float32)
    if num_steps == 0:
        return advantages, targets

    # Importance weights from log-probabilities; the difference is clipped before exp so
    # that a batch whose actions the current policy finds impossible cannot overflow.
    ratio = np.exp(np.minimum(target_logp - behaviour_logp, 50.0)).astype(np.float32)
    rho = np.minimum(ratio, np.float32(rho_bar))
    c = np.minimum(ratio, np.float32(c_bar))

    # next_value[t] = V(x_{t+1}) as GAE sees it (0 after a termination, the final
    # observation's value after a truncation, the bootstrap after the last step).
    next_value = np.empty_like(targets)
    next_value[:-1] = values[1:]
    next_value[-1] = bootstrap_value
    np.copyto(next_value, final_values, where=truncated)
    np.copyto(next_value, np.float32(0.0), where=terminated)
    ended = np.logical_or(terminated, truncated)

    delta = rho * (rewards + np.float32(gamma) * next_value - values)
    carry = np.where(ended, np.float32(0.0), np.float32(gamma) * c)

    # correction[t] = v_t - V(x_t); zero beyond the batch and across an episode end.
    correction = targets  # reused: becomes v_t below
    correction[-1] = delta[-1]
    for t in range(num_steps - 2, -1, -1):
        correction[t] = delta[t] + carry[t] * correction[t + 1]

    # v_{t+1} as the advantage needs it: the next step's target within the episode, else
    # the same value GAE would bootstrap from.
    next_target = next_value.copy()
    np.add(next_target[:-1], np.where(ended[:-1], 0.0, correction[1:]), out=next_target[:-1])
    np.multiply(rho, rewards + np.float32(gamma) * next_target - values, out=advantages)
    np.add(correction, values, out=targets)
    return advantages, targets
