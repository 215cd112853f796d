"""V-trace off-policy targets (Espeholt et al. 2018, "IMPALA", arXiv:1802.01561, section 4.1).

A numpy port of TorchBeast's `vtrace.from_importance_weights` (facebookresearch/torchbeast,
torchbeast/core/vtrace.py), itself a port of DeepMind's scalable_agent, with the trace
cutting threshold c_bar exposed (TorchBeast fixes it at 1.0). A pure function: no I/O.

Episode ends are folded into `discounts` by the caller: gamma * (1 - terminated). V-trace
has no separate truncation input, unlike `gae.compute_gae`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["VTraceReturns", "vtrace"]


class VTraceReturns(NamedTuple):
    """V-trace outputs, both [T, N] float32."""

    vs: np.ndarray
    """Value targets v_s (eq. 1 of Espeholt et al. 2018)."""
    pg_advantages: np.ndarray
    """rho_s * (r_s + gamma_s * v_{s+1} - V(x_s)), the policy-gradient advantage (eq. 4)."""


def vtrace(
    behaviour_logp: np.ndarray,
    target_logp: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    discounts: np.ndarray,
    *,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
) -> VTraceReturns:
    """Return V-trace targets and policy-gradient advantages for [T, N] inputs.

    behaviour_logp: log mu(a_t | x_t), sent by the actor; target_logp: log pi(a_t | x_t)
    under the learner's current policy; values: V(x_t) under the current value function;
    bootstrap_value [N]: V(x_T); discounts: gamma_t, 0 where the episode ended at t.

    rho_bar clips the importance weights in the TD errors (it sets which policy's value is
    learned), c_bar those in the trace (it sets the contraction speed), and pg_rho_bar those
    in the policy-gradient advantage (TorchBeast's clip_pg_rho_threshold). The paper assumes
    rho_bar >= c_bar. On-policy with the defaults, vs are the bootstrapped n-step
    (lambda = 1) returns.
    """
    if values.ndim != 2:
        raise ValueError(f"values must be [T, N], got shape {values.shape}")
    num_steps, num_envs = values.shape
    for name, arr in (
        ("behaviour_logp", behaviour_logp),
        ("target_logp", target_logp),
        ("rewards", rewards),
        ("discounts", discounts),
    ):
        if arr.shape != values.shape:
            raise ValueError(f"{name} has shape {arr.shape}, values has {values.shape}")
    if bootstrap_value.shape != (num_envs,):
        raise ValueError(f"bootstrap_value must be [{num_envs}], got {bootstrap_value.shape}")

    f32 = np.float32
    rhos = np.exp(np.subtract(target_logp, behaviour_logp, dtype=f32))  # [T, N] pi / mu
    clipped_rhos = np.minimum(rhos, f32(rho_bar))  # [T, N]
    cs = np.minimum(rhos, f32(c_bar))  # [T, N]

    # V(x_{t+1}): values shifted one step back in time, with the bootstrap at the end.
    values_t_plus_1 = np.empty((num_steps, num_envs), dtype=f32)  # [T, N]
    values_t_plus_1[:-1] = values[1:]
    values_t_plus_1[-1:] = bootstrap_value
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)  # [T, N]

    # vs_t - V(x_t) = delta_t + gamma_t * c_t * (vs_{t+1} - V(x_{t+1})) (Espeholt et al.
    # 2018, remark 1), accumulated backwards in place; 0 past the end of the batch.
    vs_minus_v = deltas  # [T, N]
    trace = discounts * cs  # [T, N]
    for t in range(num_steps - 2, -1, -1):
        vs_minus_v[t] += trace[t] * vs_minus_v[t + 1]
    vs = (vs_minus_v + values).astype(f32, copy=False)  # [T, N]

    # The policy gradient uses the V-trace target of the next state, v_{s+1} (eq. 4).
    vs_t_plus_1 = values_t_plus_1  # [T, N], buffer reused
    vs_t_plus_1[:-1] = vs[1:]
    clipped_pg_rhos = np.minimum(rhos, f32(pg_rho_bar))  # [T, N]
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)  # [T, N]
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages.astype(f32, copy=False))
