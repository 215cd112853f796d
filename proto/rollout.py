"""Rollout message v1: one msgpack header frame, then one raw frame per array (ROLLOUT.md).

`encode` returns frames that reference the caller's arrays (send them with `copy=False`);
`decode` checks a received message against what the learner expects and returns numpy
views over the received frames, never copies. Every failure is one `DecodeError`.

The decoder is on the learner's hot path (one call per batch), so the per-message work is
kept to one msgpack call, one comparison of the header's array table against the table
last accepted for the same spec and N (a cached "plan"), and one numpy reduction per array.
The full, reason-by-reason check (`_plan_for`) runs only when the table differs; both paths
raise the same reason for the same message.
"""

# One job a module: rollout_types (schema, limits, spec, batch, SeqTracker), rollout_encode
# (`encode`), rollout_decode (`decode`, `peek_sender`) and rollout_plan (the array table's
# check, decode's slow path). This module re-exports their public names.

# ruff: noqa: F401 (re-exports)
from __future__ import annotations

from .errors import DecodeError, Reason
from .rollout_decode import decode, peek_sender
from .rollout_encode import encode
from .rollout_types import (
    ALLOWED_DTYPES,
    DEFAULT_MAX_BYTES,
    MAX_ACTORS_TRACKED,
    MAX_DIM,
    MAX_HEADER_BYTES,
    MAX_ID_LEN,
    MAX_RANK,
    ROLLOUT_FAMILY,
    ROLLOUT_MAJOR,
    ROLLOUT_MINOR,
    ROLLOUT_SCHEMA,
    WIRE_DTYPES,
    ActionSpace,
    EpisodeStats,
    RolloutBatch,
    RolloutSpec,
    SeqTracker,
    parse_schema,
)
