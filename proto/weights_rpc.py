"""The weightserver's request/reply messages (ZeroMQ; ROUTER on the server side).

Spec, v1 (WEIGHTS.md describes the weights message these replies carry):

A request is one ZeroMQ message. A REQ client sends the body alone (REQ adds the empty
delimiter); a DEALER client sends an empty delimiter frame, then the body. Without the
delimiter the server still answers, echoing whatever routing frames came before the body.

Request body: one frame, a msgpack map:

    {"op": "get",  "have": int >= -1, "wait_ms": int >= 0 (optional, default 0),
     "id": any (optional, echoed)}
        "I hold version `have` (-1: none); send me a newer one if you hold it."
        With wait_ms > 0 the server holds the request (long poll) until it has a version
        newer than `have` or wait_ms passes, whichever comes first (capped by the server).
    {"op": "ping", "id": any (optional)}
        Health check: which version the server holds and whether Redis is reachable.

Reply: the routing frames of the request, then frame R0, a msgpack map:

    {"status": "weights",      "version": v, "id": ..., "finished": bool}  + 2 frames: the
                                          weights message of proto/weights_blob.py: header, blob
    {"status": "not_modified", "version": v | None, "id": ..., "finished": bool}
                                                                (nothing newer than `have`)
    {"status": "pong", "version": v | None, "id": ..., "run_id": str, "redis": "up"|"down",
     "uptime_s": float, "requests": int, "parked": int (long polls waiting), "finished": bool}
    {"status": "error", "reason": str, "id": ...}                (malformed request)

`finished` (v1.1; absent means false): the run has ended normally (its learner marked it
finished in Redis); no newer version will come, long polls are answered at once, and the
server exits a few seconds later. An actor told so exits 0.
`version` is the newest version the server holds (None before it has fetched any). The
blob frame of a "weights" reply is sent without a copy (zero-copy) from the server's cache.
Unknown request keys are ignored so that later minor versions may add fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

OP_GET = "get"
OP_PING = "ping"
STATUS_WEIGHTS = "weights"
STATUS_NOT_MODIFIED = "not_modified"
STATUS_PONG = "pong"
STATUS_ERROR = "error"
MAX_REQUEST_BYTES = 4096
MAX_WAIT_MS = 60_000


class ProtocolError(ValueError):
    """A request or reply that does not follow the spec above."""


@dataclass(frozen=True, slots=True)
class Request:
    op: str
    have: int = -1
    wait_ms: int = 0
    id: Any = None


def encode_get(have: int, *, wait_ms: int = 0, req_id: Any = None) -> bytes:
    return msgpack.packb({"op": OP_GET, "have": int(have), "wait_ms": int(wait_ms), "id": req_id})


def encode_ping(*, req_id: Any = None) -> bytes:
    return msgpack.packb({"op": OP_PING, "id": req_id})


def parse_request(body: bytes | memoryview) -> Request:
    """Decode and check one request body; anything wrong is a `ProtocolError`."""
    if len(body) > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request of {len(body)} bytes (max {MAX_REQUEST_BYTES})")
    try:
        doc = msgpack.unpackb(body, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"request is not msgpack: {exc}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("request must be a msgpack map")
    op, req_id = doc.get("op"), doc.get("id")
    if op == OP_PING:
        return Request(OP_PING, id=req_id)
    if op != OP_GET:
        raise ProtocolError(f"unknown op {str(op)[:32]!r}")
    have, wait_ms = doc.get("have", -1), doc.get("wait_ms", 0)
    if type(have) is not int or have < -1:
        raise ProtocolError("have must be an int >= -1")
    if type(wait_ms) is not int or wait_ms < 0:
        raise ProtocolError("wait_ms must be an int >= 0")
    return Request(OP_GET, have=have, wait_ms=wait_ms, id=req_id)


def encode_reply(status: str, **fields: Any) -> bytes:
    return msgpack.packb({"status": status, **fields})


def parse_reply(frame: bytes | memoryview) -> dict[str, Any]:
    try:
        doc = msgpack.unpackb(frame, raw=False)
    except Exception as exc:
        raise ProtocolError(f"reply is not msgpack: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("status"), str):
        raise ProtocolError("reply must be a msgpack map with a status")
    return doc


__all__ = [
    "MAX_REQUEST_BYTES",
    "MAX_WAIT_MS",
    "OP_GET",
    "OP_PING",
    "STATUS_ERROR",
    "STATUS_NOT_MODIFIED",
    "STATUS_PONG",
    "STATUS_WEIGHTS",
    "ProtocolError",
    "Request",
    "encode_get",
    "encode_ping",
    "encode_reply",
    "parse_reply",
    "parse_request",
]
