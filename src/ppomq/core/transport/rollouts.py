"""The rollout data plane: actor PUSH (connect) -> learner PULL (bind), over tcp:// or ipc://.

A thin layer over ZeroMQ that fixes the socket options a long-running actor/learner pair
needs, so that every service gets them right the same way:

- high-water marks (SNDHWM/RCVHWM, counted in whole messages) bound what is queued;
  a full queue is backpressure: `RolloutSender.send` waits up to its timeout, then
  returns False. Nothing here ever blocks forever.
- `IMMEDIATE` on the sender: messages queue only toward a peer whose handshake completed,
  so batches are not piled up for an absent learner and delivered late after it returns.
- ZMTP heartbeats on both sides (HEARTBEAT_IVL/TIMEOUT/TTL): a peer that stops answering
  (crashed host, cut network, frozen process) is dropped after the timeout, with whatever
  was queued for it, instead of hanging on a half-open TCP connection. The sender then
  reconnects by itself (RECONNECT_IVL, backing off to RECONNECT_IVL_MAX).
- `MAXMSGSIZE` on the receiver: a frame larger than `max_message_bytes` makes ZeroMQ drop
  the connection before the bytes are buffered. The cap is per frame; the codec checks
  the whole message against the same number (`RolloutSpec.max_bytes`).
- CURVE (`curve=`; the services require it beyond loopback): the receiver is a CURVE
  server behind the process's ZAP allow-list (ppomq.core.transport.curvezmq), the sender a CURVE
  client;
  `RolloutReceiver.authenticated` then says every received frame carries its sender's key
  (`ppomq.core.transport.curvezmq.sender_key`).
- bounded `LINGER`: `close()` returns at once and the process can exit; unsent messages
  are kept at most `linger_ms` (then dropped) rather than holding the exit. Delivery at
  close is best effort: libzmq can drop the last messages of a PUSH socket closed while
  the receiver's queue is full, linger or not (libzmq#3774, #1922). A batch lost at an
  actor's shutdown costs nothing; code that must know keeps the socket open until told.

Each object owns one socket; use it from one thread (ZeroMQ sockets are not thread-safe).
All sockets share the process's `zmq.Context.instance()`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import zmq

from ppomq.core.settings import TransportSettings
from ppomq.core.transport.curvezmq import CurveClient, CurveServer, ServerAuth, make_client

_F = TransportSettings.model_fields
DEFAULT_HWM: int = _F["rollout_hwm"].default
DEFAULT_HEARTBEAT_IVL_MS: int = _F["heartbeat_ivl_ms"].default
DEFAULT_HEARTBEAT_TIMEOUT_MS: int = _F["heartbeat_timeout_ms"].default
DEFAULT_MAX_MESSAGE_BYTES: int = _F["max_message_bytes"].default
# What CurveZMQ adds to a frame on the wire (RFC 26 MESSAGE: command name, nonce, flags,
# Poly1305 tag: 33 bytes), rounded up.
CURVE_FRAME_OVERHEAD = 64
# Not a setting (yet): long enough to flush a few queued batches on a clean stop, short
# enough that an actor whose learner is gone still exits promptly.
DEFAULT_LINGER_MS = 1000
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2000
# ZeroMQ stores HEARTBEAT_TTL in deciseconds in a 16-bit field.
_MAX_TTL_MS = 6_553_599


class MessageTooLarge(ValueError):
    """A message over `max_message_bytes`: the receiver would drop the connection for it."""


def _common_options(
    sock: zmq.Socket[Any], *, heartbeat_ivl_ms: int, heartbeat_timeout_ms: int, linger_ms: int
) -> None:
    if linger_ms < 0:
        raise ValueError("linger_ms must be >= 0: an unbounded linger can hang process exit")
    sock.setsockopt(zmq.LINGER, linger_ms)
    if heartbeat_ivl_ms > 0:
        sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ivl_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, heartbeat_timeout_ms)
        # TTL tells the *peer* to drop us if it hears nothing for this long, so both ends
        # notice a dead link even when only one of them is sending.
        sock.setsockopt(zmq.HEARTBEAT_TTL, min(heartbeat_timeout_ms, _MAX_TTL_MS))


def _check_timeout(timeout_ms: int) -> int:
    if timeout_ms < 0:
        raise ValueError("timeout_ms must be >= 0 (these calls never wait forever)")
    return timeout_ms


class _SocketEnd:
    """What both ends share: the socket, `closed`, and closing as a context manager."""

    _sock: zmq.Socket[Any]

    @property
    def socket(self) -> zmq.Socket[Any]:
        """The underlying ZeroMQ socket, for monitoring (`get_monitor_socket`) and tests."""
        return self._sock

    @property
    def closed(self) -> bool:
        return bool(self._sock.closed)

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RolloutSender(_SocketEnd):
    """The actor's end: a PUSH socket connected to the learner's `endpoint`.

    `send(encode(batch), timeout_ms=...)` returns True once the message is queued (ZeroMQ
    delivers it in the background, in order), False if no learner took it in time.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        hwm: int = DEFAULT_HWM,
        heartbeat_ivl_ms: int = DEFAULT_HEARTBEAT_IVL_MS,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        linger_ms: int = DEFAULT_LINGER_MS,
        curve: CurveClient | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.max_message_bytes = max_message_bytes
        sock = zmq.Context.instance().socket(zmq.PUSH)
        try:
            _common_options(
                sock,
                heartbeat_ivl_ms=heartbeat_ivl_ms,
                heartbeat_timeout_ms=heartbeat_timeout_ms,
                linger_ms=linger_ms,
            )
            sock.setsockopt(zmq.SNDHWM, hwm)
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
            if heartbeat_timeout_ms > 0:
                # A TCP connect or ZMTP handshake toward a host that does not answer gives
                # up with the heartbeat's patience instead of the OS's (minutes) or 30 s.
                sock.setsockopt(zmq.CONNECT_TIMEOUT, heartbeat_timeout_ms)
                sock.setsockopt(zmq.HANDSHAKE_IVL, heartbeat_timeout_ms)
            if curve is not None:
                make_client(sock, curve)
            sock.connect(endpoint)
        except BaseException:
            sock.close(linger=0)
            raise
        self._sock = sock

    @classmethod
    def from_settings(
        cls,
        endpoint: str,
        settings: TransportSettings,
        *,
        linger_ms: int = DEFAULT_LINGER_MS,
        curve: CurveClient | None = None,
    ) -> RolloutSender:
        """A sender configured from the shared transport settings."""
        return cls(
            endpoint,
            hwm=settings.rollout_hwm,
            heartbeat_ivl_ms=settings.heartbeat_ivl_ms,
            heartbeat_timeout_ms=settings.heartbeat_timeout_ms,
            max_message_bytes=settings.max_message_bytes,
            linger_ms=linger_ms,
            curve=curve,
        )

    def send(self, frames: Sequence[Any], timeout_ms: int) -> bool:
        """Queue one multipart message without copying its frames; False on timeout.

        Frames are any buffers (bytes, numpy arrays, memoryviews). They must not change
        until ZeroMQ has sent them. Raises `MessageTooLarge` above `max_message_bytes`.
        """
        _check_timeout(timeout_ms)
        if not frames:
            raise ValueError("a ZeroMQ message has at least one frame")
        total = sum(memoryview(f).nbytes for f in frames)
        if total > self.max_message_bytes:
            raise MessageTooLarge(f"message of {total} bytes > {self.max_message_bytes}")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                # NOBLOCK: the first frame is taken or refused as a whole message (ZeroMQ
                # multipart is atomic), so a refusal here never leaves half a message.
                self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                return True
            except zmq.Again:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            # POLLOUT: a connected peer with room under its HWM (with IMMEDIATE, an absent
            # peer never reports room, so this waits out the timeout instead of queueing).
            self._sock.poll(max(1, int(remaining * 1000)), zmq.POLLOUT)

    def close(self) -> None:
        """Close the socket now; unsent messages get at most `linger_ms` to leave."""
        if not self._sock.closed:
            self._sock.close()


class RolloutReceiver(_SocketEnd):
    """The learner's end: a PULL socket bound at `endpoint`, fair-queuing all actors.

    Bind to `tcp://127.0.0.1:0` (or `:*`) for a free port; `endpoint` then holds the
    address actually bound, ready to hand to senders.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        hwm: int = DEFAULT_HWM,
        heartbeat_ivl_ms: int = DEFAULT_HEARTBEAT_IVL_MS,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        linger_ms: int = 0,
        curve: CurveServer | None = None,
    ) -> None:
        sock = zmq.Context.instance().socket(zmq.PULL)
        self._auth: ServerAuth | None = None
        try:
            _common_options(
                sock,
                heartbeat_ivl_ms=heartbeat_ivl_ms,
                heartbeat_timeout_ms=heartbeat_timeout_ms,
                linger_ms=linger_ms,
            )
            sock.setsockopt(zmq.RCVHWM, hwm)
            # Under CURVE libzmq checks the encrypted frame, a few dozen bytes longer: a
            # frame within the cap must not cost its connection (and what is in flight).
            overhead = CURVE_FRAME_OVERHEAD if curve is not None else 0
            sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes + overhead)
            if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
                endpoint = endpoint[:-2] + ":*"  # ZeroMQ's spelling of "any free port"
            if curve is not None:
                self._auth = ServerAuth(sock, curve)
            sock.bind(endpoint)
            self.endpoint: str = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        except BaseException:
            sock.close(linger=0)
            if self._auth is not None:
                self._auth.release()
            raise
        self._sock = sock

    @classmethod
    def from_settings(
        cls, endpoint: str, settings: TransportSettings, *, curve: CurveServer | None = None
    ) -> RolloutReceiver:
        """A receiver configured from the shared transport settings."""
        return cls(
            endpoint,
            hwm=settings.rollout_hwm,
            heartbeat_ivl_ms=settings.heartbeat_ivl_ms,
            heartbeat_timeout_ms=settings.heartbeat_timeout_ms,
            max_message_bytes=settings.max_message_bytes,
            curve=curve,
        )

    @property
    def authenticated(self) -> bool:
        """CURVE is on: every message comes from an allowed key, named in its User-Id."""
        return self._auth is not None

    def recv(self, timeout_ms: int) -> list[zmq.Frame] | None:
        """The next message as zero-copy frames (feed them to `decode`), or None on timeout."""
        _check_timeout(timeout_ms)
        if not self._sock.poll(timeout_ms, zmq.POLLIN):
            return None
        try:
            return self._sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:  # a message is delivered whole or not at all; this is a spurious wake
            return None

    def close(self) -> None:
        """Close the socket and, for ipc://, remove the socket file this receiver bound."""
        if self._sock.closed:
            return
        self._sock.close()
        if self._auth is not None:
            self._auth.release()
        # ZeroMQ leaves the file behind; a stale one misleads whoever looks for a learner.
        path = self.endpoint.removeprefix("ipc://")
        if path != self.endpoint and not path.startswith("@"):  # "@": abstract, no file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


__all__ = [
    "DEFAULT_LINGER_MS",
    "MessageTooLarge",
    "RolloutReceiver",
    "RolloutSender",
]
