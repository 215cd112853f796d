"""ppomq wire format: message types, encode/decode and validation. No I/O here.

The specs a stranger can implement from live beside this file: ROLLOUT.md and WEIGHTS.md.
This package imports nothing else of ppomq.
"""

from .errors import DecodeError, Reason
from .rollout import (
    ROLLOUT_SCHEMA,
    ActionSpace,
    EpisodeStats,
    RolloutBatch,
    RolloutSpec,
    SeqTracker,
    decode,
    encode,
    peek_sender,
)
from .weights import (
    WEIGHTS_SCHEMA,
    TensorEntry,
    WeightsHeader,
    decode_weights,
    encode_weights,
    pack_weights,
    unpack_tensors,
)

__all__ = [
    "ROLLOUT_SCHEMA",
    "WEIGHTS_SCHEMA",
    "ActionSpace",
    "DecodeError",
    "EpisodeStats",
    "Reason",
    "RolloutBatch",
    "RolloutSpec",
    "SeqTracker",
    "TensorEntry",
    "WeightsHeader",
    "decode",
    "decode_weights",
    "encode",
    "encode_weights",
    "pack_weights",
    "peek_sender",
    "unpack_tensors",
]
