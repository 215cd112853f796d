"""The hello message, and the header read that comes before a batch's decode.

A hello (ROLLOUT.md "Hello") is one frame: an actor holding no grant says it is there, so
the learner can grant it a batch with a later version. `batch_key` reads a batch's actor
and version from its header alone, so a learner can drop a batch its sender was not
granted for the price of that read, before the arrays are checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgpack

from ppomq.proto.rollout_types import (
    MAX_HEADER_BYTES,
    MAX_ID_LEN,
    ROLLOUT_FAMILY,
    ROLLOUT_MAJOR,
    ROLLOUT_SCHEMA,
    parse_schema,
)

HELLO = "hello"


def encode_hello(*, run_id: str, actor_id: str) -> list[bytes]:
    """An actor's hello: one frame."""
    header = {"schema": ROLLOUT_SCHEMA, "kind": HELLO, "run_id": run_id, "actor_id": actor_id}
    return [msgpack.packb(header)]


def _header(frames: Sequence[Any]) -> dict[str, Any] | None:
    try:
        if not frames or memoryview(frames[0]).nbytes > MAX_HEADER_BYTES:
            return None
        h = msgpack.unpackb(frames[0])
    except Exception:
        return None
    return h if type(h) is dict else None


def _id(value: Any) -> str | None:
    return value if type(value) is str and 0 < len(value) <= MAX_ID_LEN else None


def read_hello(frames: Sequence[Any], run_id: str) -> str | None:
    """The actor_id of a well-formed hello for `run_id`; None for anything else (which
    then goes through `decode` and is refused there with its reason)."""
    if len(frames) != 1:
        return None
    h = _header(frames)
    if h is None or h.get("kind") != HELLO or h.get("run_id") != run_id:
        return None
    try:
        family, major, _ = parse_schema(h.get("schema"))
    except Exception:
        return None
    if family != ROLLOUT_FAMILY or major != ROLLOUT_MAJOR:
        return None
    return _id(h.get("actor_id"))


class BatchKey(NamedTuple):
    actor_id: str
    policy_version: int
    env_steps: int  # num_steps x num_envs as claimed (0 when not both ints)


def batch_key(frames: Sequence[Any]) -> BatchKey | None:
    """A message's actor and policy version as its header claims them; None when the header
    does not name both (`decode` then refuses it with its reason)."""
    h = _header(frames)
    if h is None:
        return None
    actor_id, version = _id(h.get("actor_id")), h.get("policy_version")
    if actor_id is None or type(version) is not int or version < 0:
        return None
    n, t = h.get("num_envs"), h.get("num_steps")
    steps = n * t if type(n) is int and type(t) is int and n > 0 and t > 0 else 0
    return BatchKey(actor_id, version, steps)
