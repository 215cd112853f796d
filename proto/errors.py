"""The one error type that leaves a decoder, and the reason codes it carries.

Codes are part of the wire spec (ROLLOUT.md, WEIGHTS.md): never renumber, only append.
"""

from __future__ import annotations

from enum import Enum


class Reason(Enum):
    """Why a message was rejected: (numeric code, short name used in metrics and logs)."""

    FRAME_COUNT = (1, "frame_count")
    HEADER_NOT_MSGPACK = (2, "header_not_msgpack")
    HEADER_INVALID = (3, "header_invalid")
    SCHEMA_UNKNOWN = (4, "schema_unknown")
    SCHEMA_MAJOR = (5, "schema_major")
    RUN_ID = (6, "run_id")
    ENV_ID = (7, "env_id")
    SEQ_NOT_INCREASING = (8, "seq_not_increasing")
    DTYPE_NOT_ALLOWED = (9, "dtype_not_allowed")
    DTYPE_MISMATCH = (10, "dtype_mismatch")
    SHAPE_MISMATCH = (11, "shape_mismatch")
    BYTE_COUNT = (12, "byte_count")
    MISSING_ARRAY = (13, "missing_array")
    UNKNOWN_ARRAY = (14, "unknown_array")
    DUPLICATE_ARRAY = (15, "duplicate_array")
    NON_FINITE = (16, "non_finite")
    ACTION_OUT_OF_SPACE = (17, "action_out_of_space")
    OVERSIZE = (18, "oversize")
    EPISODES_INVALID = (19, "episodes_invalid")
    CHECKSUM = (20, "checksum")
    STALE = (21, "stale")  # raised by the learner's staleness gate, not by decode
    INVALID_VALUE = (22, "invalid_value")
    # Raised by the learner's receiver under CURVE, after decoding: the batch's actor_id
    # does not end with its sender's key suffix (ROLLOUT.md "Authentication").
    ACTOR_ID_NOT_KEY = (23, "actor_id_not_key")
    # Raised by the learner's episode book: the header's `episodes` are not the episodes
    # the batch's own rewards and episode ends make (ROLLOUT.md "Episodes").
    EPISODES_MISMATCH = (24, "episodes_mismatch")

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def label(self) -> str:
        return self.value[1]


class DecodeError(Exception):
    """A message that must not be used. `reason` says why; the text gives the detail."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason.label}: {detail}")
        self.reason = reason
        self.detail = detail
