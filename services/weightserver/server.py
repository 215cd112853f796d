"""WeightServer: a ROUTER socket answering actors' "newer than v?" (proto/weights_rpc.py).

It answers "not modified", or the held header+blob sent zero-copy, from the follower's cache
(follower.py), and never touches Redis, so a slow or absent Redis never delays an answer.
Long-poll requests wait (parking.py) until a newer version arrives (the follower pokes an
inproc socket) or their deadline passes. At the run's end it tells every client that was
active (run_end.py), then returns.

No state but the cache, so any number of replicas may serve the same run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from typing import Any

import zmq

from ppomq.core.transport.curvezmq import CurveServer, ServerAuth
from ppomq.proto import weights_rpc as protocol
from ppomq.weightserver.follower import Held, VersionFollower
from ppomq.weightserver.parking import Parked, ParkedRequests
from ppomq.weightserver.run_end import RunEndRollCall

log = logging.getLogger("ppomq.weightserver")

# How often the serve loop looks at the stop flag and its parked deadlines.
TICK_S = 0.1
# Requests handled before the loop looks at wake-ups and deadlines again, so that a flood
# of requests cannot starve them.
REQUESTS_PER_TURN = 1000


class WeightServer:
    """A ROUTER socket answering "newer than v?" from the follower's cache.

    `serve_forever()` runs in the calling thread until `stop()` (safe from a signal
    handler or another thread) or until every client has heard of the run's end; `close()`
    releases the sockets.
    """

    def __init__(
        self,
        *,
        redis_url: str,
        run_id: str,
        bind: str,
        poll_interval_s: float = 1.0,
        context: zmq.Context | None = None,
        max_wait_ms: int = protocol.MAX_WAIT_MS,
        max_parked: int = 10_000,
        curve: CurveServer | None = None,
    ) -> None:
        self.run_id = run_id
        self.max_wait_ms = max_wait_ms
        self.counters: Counter[str] = Counter()
        self._ctx = context or zmq.Context.instance()
        self._stop_event = threading.Event()
        # stop() also writes here, and the serve loop polls it: a stop (often from a signal
        # handler, which runs while the poll waits but cannot end the wait) then ends the
        # loop at once instead of at its next tick.
        self._stop_r, self._stop_w = os.pipe()
        os.set_blocking(self._stop_r, False)
        os.set_blocking(self._stop_w, False)
        self._parked = ParkedRequests(max_parked)
        self._roll_call = RunEndRollCall(max_parked)
        self._started = time.monotonic()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        # Requests are tiny; refuse anything big before it is buffered.
        self._router.setsockopt(zmq.MAXMSGSIZE, 64 * protocol.MAX_REQUEST_BYTES)
        # CURVE: only allow-listed actor keys (and the server's own) get through.
        self._auth = ServerAuth(self._router, curve) if curve is not None else None
        try:
            self._router.bind(bind)
        except zmq.ZMQError:
            self._router.close()
            if self._auth is not None:
                self._auth.release()
            raise
        self.endpoint = self._router.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._wake = self._ctx.socket(zmq.PULL)
        self._wake.setsockopt(zmq.LINGER, 0)
        wake_endpoint = f"inproc://ppomq-weightserver-wake-{id(self)}"
        self._wake.bind(wake_endpoint)
        self.follower = VersionFollower(
            redis_url=redis_url,
            run_id=run_id,
            poll_interval_s=poll_interval_s,
            context=self._ctx,
            wake_endpoint=wake_endpoint,
            stop=self._stop_event,
        )

    @property
    def held_version(self) -> int | None:
        held = self.follower.held
        return None if held is None else held.version

    @property
    def finished(self) -> bool:
        """The run this server serves has ended normally (its learner said so)."""
        return self.follower.finished_at is not None

    def stop(self) -> None:
        self._stop_event.set()
        with contextlib.suppress(OSError):  # full (a wake-up is pending) or closed
            os.write(self._stop_w, b"x")

    def serve_forever(self) -> None:
        if not self.follower.is_alive():
            self.follower.start()
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(self._wake, zmq.POLLIN)
        poller.register(self._stop_r, zmq.POLLIN)
        while not self._stop_event.is_set():
            events = dict(poller.poll(self._poll_timeout_ms()))
            if self._wake in events:
                _drain(self._wake)
                self._release_parked()
            if self._router in events:
                for _ in range(REQUESTS_PER_TURN):
                    try:
                        frames = self._router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._handle(frames)
            self._turn_away(self._parked.take_expired(time.monotonic()))
            finished_at = self.follower.finished_at
            if finished_at is not None and self._everyone_told(finished_at):
                log.info("run %r finished; weightserver exiting", self.run_id)
                break
        # Answer the waiting clients now rather than letting them time out.
        self._turn_away(self._parked.take_all())

    def _everyone_told(self, finished_at: float) -> bool:
        self._release_parked()  # parked long polls hear it now
        return self._roll_call.everyone_told(finished_at, time.monotonic())

    def close(self) -> None:
        self._stop_event.set()
        if self.follower.is_alive():
            self.follower.join(timeout=5)
        self._router.close()
        self._wake.close()
        if self._auth is not None:
            self._auth.release()
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1  # a second close must not close a reused fd

    def stats(self) -> dict[str, Any]:
        return {
            "version": self.held_version,
            "redis_up": self.follower.redis_up,
            "uptime_s": round(time.monotonic() - self._started, 3),
            "parked": len(self._parked),
            "finished": self.finished,
            **{f"replies_{k}": v for k, v in self.counters.items()},
        }

    # --- requests ---------------------------------------------------------------------

    def _handle(self, frames: list[bytes]) -> None:
        # Routing frames run up to the first empty delimiter (REQ, DEALER+delimiter); a
        # raw DEALER sends none, then only ROUTER's identity frame routes the reply.
        try:
            split = frames.index(b"", 1) + 1
        except ValueError:
            split = 1
        envelope, body = frames[:split], frames[split:]
        self.counters["requests"] += 1
        if len(body) != 1:
            self._send(envelope, protocol.STATUS_ERROR, None, reason="expected one body frame")
            return
        try:
            req = protocol.parse_request(body[0])
        except protocol.ProtocolError as exc:
            self._send(envelope, protocol.STATUS_ERROR, None, reason=str(exc))
            return
        if req.op == protocol.OP_PING:
            self._send(
                envelope,
                protocol.STATUS_PONG,
                req.id,
                version=self.held_version,
                run_id=self.run_id,
                redis="up" if self.follower.redis_up else "down",
                uptime_s=round(time.monotonic() - self._started, 3),
                requests=self.counters["requests"],
                parked=len(self._parked),
                finished=self.finished,
            )
            return
        now = time.monotonic()
        self._roll_call.asked(envelope[0], now)
        held = self.follower.held
        if held is not None and held.version > req.have:
            self._send_weights(envelope, req, held)
        elif req.wait_ms > 0 and self._parked.has_room and not self.finished:
            wait_s = min(req.wait_ms, self.max_wait_ms) / 1000
            self._parked.park(envelope, req, now + wait_s)
        else:
            self._send_not_modified(envelope, req)

    def _release_parked(self) -> None:
        """Answer the parked requests that a newer version, or the run's end, answers."""
        held = self.follower.held
        version = None if held is None else held.version
        for parked in self._parked.take_answerable(version, finished=self.finished):
            if held is not None and held.version > parked.request.have:
                self._send_weights(parked.envelope, parked.request, held)
            else:
                self._send_not_modified(parked.envelope, parked.request)

    def _turn_away(self, parked: list[Parked]) -> None:
        for one in parked:
            self._send_not_modified(one.envelope, one.request)

    def _poll_timeout_ms(self) -> int:
        timeout = TICK_S
        soonest = self._parked.seconds_to_soonest(time.monotonic())
        if soonest is not None:
            timeout = min(timeout, soonest)
        return max(1, int(timeout * 1000))

    # --- replies ----------------------------------------------------------------------

    def _told(self, envelope: list[bytes]) -> None:
        finished_at = self.follower.finished_at
        if finished_at is not None:
            self._roll_call.told(envelope[0], finished_at)

    def _send_weights(self, envelope: list[bytes], req: protocol.Request, held: Held) -> None:
        self._told(envelope)
        self.counters[protocol.STATUS_WEIGHTS] += 1
        reply = protocol.encode_reply(
            protocol.STATUS_WEIGHTS, version=held.version, id=req.id, finished=self.finished
        )
        # copy=False: the blob goes out from our cached bytes without a copy, however many
        # actors ask; pyzmq holds a reference until libzmq has sent it.
        self._router.send_multipart([*envelope, reply, held.header_bytes, held.blob], copy=False)

    def _send_not_modified(self, envelope: list[bytes], req: protocol.Request) -> None:
        self._send(
            envelope,
            protocol.STATUS_NOT_MODIFIED,
            req.id,
            version=self.held_version,
            finished=self.finished,
        )

    def _send(self, envelope: list[bytes], status: str, req_id: Any, **fields: Any) -> None:
        if fields.get("finished"):
            self._told(envelope)
        self.counters[status] += 1
        self._router.send_multipart([*envelope, protocol.encode_reply(status, id=req_id, **fields)])


def _drain(sock: zmq.Socket) -> None:
    while True:
        try:
            sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return
