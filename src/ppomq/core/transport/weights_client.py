"""What an actor uses to get newer weights from the weightserver(s).

    client = WeightsClient("tcp://weightserver:5556", timeout_ms=2000)
    got = client.get_newer(have_version)        # None: nothing newer
    if got is not None:
        header, blob = got                       # blob: zero-copy view of the frame
        model.load_state_dict(weights_to_state_dict(header, blob))

Integrity is checked once, at the weightserver: it recomputes each version's sha256
before serving it and never serves one that fails. Clients therefore skip the sha256 by
default (`verify=False`; sizes and the header are always checked): with many actors on
few cores, each actor's redundant sha256 pass over a CNN's weights adds to every
publish-to-actor latency (benchmarks/results/weights.md). Pass `verify=True` to check
again on the actor.

A DEALER socket (not REQ) so that a lost reply never wedges the socket; after a timeout
the socket is closed and recreated anyway ("lazy pirate"), so no stale request stays
queued for a server that comes back. Given several endpoints (replicas), requests go
round-robin among the connected ones. With `curve` the socket is a CURVE client: a server
that refuses its key never answers, and requests time out (`WeightsTimeoutError`); the
failed handshake's likely cause is logged (ppomq.core.transport.curvezmq, `last_client_failure`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import zmq

from ppomq.core.transport.curvezmq import CurveClient, make_client
from ppomq.proto import weights_rpc as protocol
from ppomq.proto.weights_blob import WeightsHeader, decode_weights


class WeightsTimeoutError(TimeoutError):
    """No weightserver answered in time; keep the weights you have and ask again later."""


class WeightserverError(RuntimeError):
    """The weightserver answered with an error (a bug or a version mismatch)."""


class WeightsClient:
    """Ask weightservers for weights newer than the ones held. Not thread-safe."""

    def __init__(
        self,
        endpoint: str | Sequence[str],
        *,
        timeout_ms: int = 2000,
        verify: bool = False,
        context: zmq.Context | None = None,
        curve: CurveClient | None = None,
    ) -> None:
        self.endpoints = [endpoint] if isinstance(endpoint, str) else list(endpoint)
        if not self.endpoints:
            raise ValueError("WeightsClient needs at least one endpoint")
        self.timeout_ms = timeout_ms
        self.verify = verify
        self.curve = curve
        self._ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._sock: zmq.Socket | None = None
        self.reconnects = 0
        # The last answer said the run has finished (proto/weights_rpc.py `finished`).
        self.run_finished = False

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if self.curve is not None:
                make_client(sock, self.curve)
            for ep in self.endpoints:
                sock.connect(ep)
            self._sock = sock
        return self._sock

    def _reset(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
            self.reconnects += 1

    def _request(self, body: bytes, req_id: int, timeout_ms: int) -> list[zmq.Frame]:
        """Send one request and return the reply frames after the delimiter."""
        sock = self._socket()
        deadline = time.monotonic() + timeout_ms / 1000
        try:
            sock.send_multipart([b"", body], zmq.NOBLOCK)
        except zmq.Again:
            self._reset()
            raise WeightsTimeoutError(f"cannot queue a request to {self._where()}") from None
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not sock.poll(remaining_ms, zmq.POLLIN):
                self._reset()
                raise WeightsTimeoutError(f"no answer from {self._where()} within {timeout_ms} ms")
            frames = sock.recv_multipart(copy=False)
            if len(frames) < 2 or frames[0].bytes != b"":
                continue  # not a reply to a delimited request: ignore it
            reply = protocol.parse_reply(frames[1].buffer)
            if reply.get("id") != req_id:
                continue  # a late answer to an earlier request that we gave up on
            return frames[1:]

    def get_newer(
        self, have_version: int, *, wait_ms: int = 0
    ) -> tuple[WeightsHeader, memoryview] | None:
        """The newest weights if newer than `have_version` (-1: none held), else None.

        With `wait_ms` > 0 the server holds the question until it has something newer
        or `wait_ms` passes (long poll). The blob is a view of the received frame (no
        copy); sizes are always checked, the sha256 too when `verify`. Raises
        `WeightsTimeoutError` when no server answers within `timeout_ms` (+ `wait_ms`).
        """
        req_id = next(self._ids)
        body = protocol.encode_get(have_version, wait_ms=wait_ms, req_id=req_id)
        frames = self._request(body, req_id, self.timeout_ms + wait_ms)
        reply = protocol.parse_reply(frames[0].buffer)
        self.run_finished = bool(reply.get("finished", False))
        status = reply["status"]
        if status == protocol.STATUS_NOT_MODIFIED:
            return None
        if status != protocol.STATUS_WEIGHTS:
            raise WeightserverError(f"weightserver answered {status}: {reply.get('reason')}")
        header, blob = decode_weights([frames[1].buffer, frames[2].buffer], verify=self.verify)
        if header.version <= have_version:
            # A server must never send these; treat as "nothing newer" rather than regress.
            return None
        return header, blob

    def ping(self, *, timeout_ms: int | None = None) -> dict[str, Any]:
        """The server's health: {"version", "redis": "up"|"down", "run_id", ...}."""
        req_id = next(self._ids)
        frames = self._request(
            protocol.encode_ping(req_id=req_id), req_id, timeout_ms or self.timeout_ms
        )
        reply = protocol.parse_reply(frames[0].buffer)
        if reply["status"] != protocol.STATUS_PONG:
            raise WeightserverError(f"weightserver answered {reply['status']} to ping")
        return reply

    def _where(self) -> str:
        return ", ".join(self.endpoints)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def __enter__(self) -> WeightsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["WeightsClient", "WeightsTimeoutError", "WeightserverError"]
