"""ppomq wire format: message types, encode/decode and validation. No I/O here.

The specs a stranger can implement from live beside this file: ROLLOUT.md and WEIGHTS.md.
This package imports nothing else of ppomq.
"""

from ppomq.proto.errors import DecodeError, Reason
from ppomq.proto.rollout_decode import decode, peek_sender
from ppomq.proto.rollout_encode import encode
from ppomq.proto.rollout_hello import BatchKey, batch_key, encode_hello, read_hello
from ppomq.proto.rollout_types import (
    ROLLOUT_SCHEMA,
    ActionSpace,
    EpisodeStats,
    RolloutBatch,
    RolloutSpec,
    SeqTracker,
)
from ppomq.proto.weights_blob import (
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
    "BatchKey",
    "DecodeError",
    "EpisodeStats",
    "Reason",
    "RolloutBatch",
    "RolloutSpec",
    "SeqTracker",
    "TensorEntry",
    "WeightsHeader",
    "batch_key",
    "decode",
    "decode_weights",
    "encode",
    "encode_hello",
    "encode_weights",
    "pack_weights",
    "peek_sender",
    "read_hello",
    "unpack_tensors",
]
