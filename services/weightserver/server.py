"""The weightserver: the newest weights of one run in memory, served to many actors.

Two threads, each owning its sockets:
- `VersionFollower` keeps the newest version from Redis in memory. It wakes on the pub/sub
  announcement and also polls (announcements are fire-and-forget: one sent while we were
  reconnecting is lost). If Redis goes away it keeps what it holds, logs it once, and
  reconnects with exponential backoff.
- `WeightServer.serve_forever` answers a ROUTER socket (proto/weights_rpc.py): "not modified", or
  the held header+blob sent zero-copy. It never touches Redis, so a slow or absent Redis
  never delays an answer. Long-poll requests wait in `_parked` until a newer version
  arrives (the follower pokes an inproc socket) or their deadline passes.

No state but the cache, so any number of replicas may serve the same run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zmq

from ppomq.core.errors import UserError
from ppomq.core.log import setup_logging
from ppomq.core.service_shell import service_shell
from ppomq.core.store.connect import REDIS_FAILURES, describe_redis_error, make_redis, redact_url
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import VersionNotFoundError, WeightStore
from ppomq.core.transport.curvezmq import CurveServer, ServerAuth, server_from_settings
from ppomq.proto import weights_rpc as protocol
from ppomq.proto.errors import DecodeError, Reason
from ppomq.proto.weights_blob import WeightsHeader, decode_weights

if TYPE_CHECKING:
    from ppomq.core.settings import WeightserverSettings

log = logging.getLogger("ppomq.weightserver")

BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 5.0
# How often the serve loop and the follower look at the stop flag (bounds shutdown time).
TICK_S = 0.1
# The follower's, shorter: nothing can wake its wait on Redis and close() joins it, so this
# bounds how long a stopping weightserver takes (the end of every `ppomq train` waits for
# it). Measured on an idle weightserver: 0.3 % of a core at 0.1 s, 0.4 % at 0.05 s.
FOLLOW_TICK_S = 0.05
# Once its run is marked finished, a weightserver answers every request at once, saying so
# (actors then exit 0), then exits 0 itself: as soon as every client that asked within
# CLIENT_ACTIVE_S before the end has been told, at most this long after it. Each actor asks
# at least every long poll (0.5 s), so this leaves one that is busy several chances.
FINISH_GRACE_S = 5.0
CLIENT_ACTIVE_S = 10.0


@dataclass(frozen=True, slots=True)
class Held:
    """One version as served: the header bytes exactly as stored, and the blob."""

    version: int
    header: WeightsHeader
    header_bytes: bytes
    blob: bytes


class VersionFollower(threading.Thread):
    """Follows the run's newest version in Redis; `held` is what it has (or None).

    `held` is replaced by one reference assignment, which the serving thread reads
    without a lock. Each new version is checked (header, size, sha256) once, here, so a
    corrupt version in Redis is logged and skipped instead of reaching the actors.
    """

    def __init__(
        self,
        *,
        redis_url: str,
        run_id: str,
        poll_interval_s: float,
        context: zmq.Context,
        wake_endpoint: str,
        stop: threading.Event,
        redis_timeout_s: float = 2.0,
    ) -> None:
        super().__init__(name="weights-follower", daemon=True)
        self.redis_url = redis_url
        self.run_id = run_id
        self.poll_interval_s = poll_interval_s
        self.redis_timeout_s = redis_timeout_s
        self.held: Held | None = None
        self.redis_up = False
        self._ctx = context
        self._wake_endpoint = wake_endpoint
        self._stop_event = stop
        self._down_since: float | None = None
        self._bad_versions: set[int] = set()
        self._said_empty = False
        self._said_behind = False
        # The run's `finished` marker: one already there when we start belongs to a run
        # that ended before us (a new learner on the run id clears it); only one that
        # appears, or changes, while we serve ends this run.
        self.finished_at: float | None = None
        self._marker_checked = False
        self._stale_marker: bytes | None = None

    def run(self) -> None:
        wake = self._ctx.socket(zmq.PUSH)
        wake.setsockopt(zmq.LINGER, 0)
        wake.connect(self._wake_endpoint)
        backoff = BACKOFF_MIN_S
        client = pubsub = None
        try:
            while not self._stop_event.is_set():
                try:
                    if client is None:
                        client = make_redis(self.redis_url, timeout_s=self.redis_timeout_s)
                        pubsub = client.pubsub(ignore_subscribe_messages=True)
                        # Subscribe before reading `latest`: a version published between
                        # the two is then announced to us rather than missed until a poll.
                        pubsub.subscribe(RunKeys(self.run_id).channel)
                        self._mark_up()  # connected (and authenticated) to send it
                    self._refresh(WeightStore(client, self.run_id), wake)
                    self._check_finished(client, wake)
                    backoff = BACKOFF_MIN_S
                    self._wait_for_announcement(pubsub)
                except Exception as exc:
                    # Whatever it was (Redis gone, ACL, a bad key), drop the connection and
                    # retry later: serving what we hold matters more than this thread.
                    self._mark_down(exc)
                    _close_quietly(pubsub, client)
                    client = pubsub = None
                    self._stop_event.wait(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
        finally:
            _close_quietly(pubsub, client)
            wake.close()

    def _wait_for_announcement(self, pubsub: Any) -> None:
        """Return on an announcement, at the poll interval, or when asked to stop."""
        deadline = time.monotonic() + self.poll_interval_s
        while not self._stop_event.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            msg = pubsub.get_message(timeout=min(FOLLOW_TICK_S, remaining))
            if msg is not None and msg.get("type") == "message":
                return

    def _refresh(self, store: WeightStore, wake: zmq.Socket) -> None:
        for _ in range(3):  # retention may delete `latest` under us; read it again
            latest = store.latest_version()
            if latest is None:
                if not self._said_empty:
                    log.info("run %r has no weights in Redis yet; waiting", self.run_id)
                    self._said_empty = True
                return
            held = self.held
            if held is not None and latest < held.version and not self._said_behind:
                # Redis restored from an older snapshot, or the run restarted: actors only
                # move forward, so keep the newer weights and say why nothing changes.
                log.warning(
                    "Redis says latest is %d but we serve %d; keeping %d until a newer one",
                    latest,
                    held.version,
                    held.version,
                )
                self._said_behind = True
            if (held is not None and latest <= held.version) or latest in self._bad_versions:
                return
            try:
                header_bytes, blob = store.fetch_raw(latest)
            except VersionNotFoundError:
                continue
            try:
                header, _ = decode_weights([header_bytes, blob], verify=True)
                if header.version != latest:
                    raise DecodeError(
                        Reason.HEADER_INVALID, f"header says version {header.version}, key {latest}"
                    )
            except DecodeError as exc:
                self._bad_versions.add(latest)
                log.error(
                    "version %d in Redis is invalid (%s); still serving %s",
                    latest,
                    exc,
                    held.version if held else "nothing",
                )
                return
            self.held = Held(latest, header, header_bytes, blob)
            self._said_empty = self._said_behind = False
            log.info(
                "now serving version %d (%d tensors, %d bytes, sha256 %s)",
                latest,
                len(header.tensors),
                len(blob),
                header.sha256[:12],
            )
            with contextlib.suppress(zmq.Again):  # a wake-up is already queued: enough
                wake.send(b"", zmq.NOBLOCK)
            return

    def _check_finished(self, client: Any, wake: zmq.Socket) -> None:
        if self.finished_at is not None:
            return
        raw = client.get(RunKeys(self.run_id).finished)
        if not self._marker_checked:
            self._marker_checked = True
            if raw is not None:
                self._stale_marker = raw
                log.info("run %r is marked finished by an earlier learner; serving it until "
                         "a new run starts on it", self.run_id)  # fmt: skip
                return
        if raw is None or raw == self._stale_marker:
            self._stale_marker = None if raw is None else self._stale_marker
            return
        self.finished_at = time.monotonic()
        log.info("run %r finished (%s): telling actors for %.0f s, then exiting",
                 self.run_id, raw.decode(errors="replace"), FINISH_GRACE_S)  # fmt: skip
        with contextlib.suppress(zmq.Again):  # answer the parked long polls now
            wake.send(b"", zmq.NOBLOCK)

    def _mark_up(self) -> None:
        if not self.redis_up:
            if self._down_since is not None:
                log.warning(
                    "Redis at %s is reachable again after %.1f s",
                    redact_url(self.redis_url),
                    time.monotonic() - self._down_since,
                )
            else:
                log.info("connected to Redis at %s", redact_url(self.redis_url))
        self.redis_up = True
        self._down_since = None

    def _mark_down(self, exc: Exception) -> None:
        held = self.held
        serving = f"version {held.version}" if held else "nothing yet"
        if self.redis_up or self._down_since is None:
            if isinstance(exc, REDIS_FAILURES):
                log.warning(
                    "%s; still serving %s; reconnecting with backoff (up to %.0f s)",
                    describe_redis_error(exc, self.redis_url),
                    serving,
                    BACKOFF_MAX_S,
                )
            else:
                log.exception("reading Redis failed; still serving %s; will retry", serving)
            self._down_since = time.monotonic()
        else:
            log.debug("Redis still unavailable: %s", exc)
        self.redis_up = False


def _close_quietly(*things: Any) -> None:
    for thing in things:
        if thing is None:
            continue
        with contextlib.suppress(Exception):  # closing a broken connection may raise
            thing.close()


@dataclass(slots=True)
class _Parked:
    envelope: list[bytes]
    request: protocol.Request
    deadline: float


class WeightServer:
    """A ROUTER socket answering "newer than v?" from the follower's cache.

    `serve_forever()` runs in the calling thread until `stop()` (safe from a signal
    handler or another thread); `close()` releases the sockets.
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
        self.max_parked = max_parked
        self.counters: Counter[str] = Counter()
        self._ctx = context or zmq.Context.instance()
        self._stop_event = threading.Event()
        # stop() also writes here, and the serve loop polls it: a stop (often from a signal
        # handler, which runs while the poll waits but cannot end the wait) then ends the
        # loop at once instead of at its next tick.
        self._stop_r, self._stop_w = os.pipe()
        os.set_blocking(self._stop_r, False)
        os.set_blocking(self._stop_w, False)
        self._parked: list[_Parked] = []
        # ROUTER identity -> when it last asked for weights; at the run's end, the ones
        # still to be told (every actor, those added by hand included, must hear it).
        self._clients: dict[bytes, float] = {}
        self._untold: set[bytes] | None = None
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
                # Bounded, so a flood of requests cannot starve wake-ups and deadlines.
                for _ in range(1000):
                    try:
                        frames = self._router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._handle(frames)
            self._expire_parked()
            finished_at = self.follower.finished_at
            if finished_at is not None and self._everyone_told(finished_at):
                log.info("run %r finished; weightserver exiting", self.run_id)
                break
        # Answer the waiting clients now rather than letting them time out.
        for parked in self._parked:
            self._send_not_modified(parked.envelope, parked.request)
        self._parked.clear()

    def _everyone_told(self, finished_at: float) -> bool:
        """Whether every client active before the end has heard it (or the grace is over)."""
        self._release_parked()  # parked long polls hear it now
        untold = self._pending()
        if time.monotonic() - finished_at >= FINISH_GRACE_S:
            if untold:
                log.info("%d client(s) did not ask again within %.0f s of the end",
                         len(untold), FINISH_GRACE_S)  # fmt: skip
            return True
        return not untold

    def _pending(self) -> set[bytes]:
        """Clients active before the end that have not been told it yet (made when the end
        is first seen: only clients that asked within CLIENT_ACTIVE_S before it)."""
        if self._untold is None:
            end = self.follower.finished_at or time.monotonic()
            self._untold = {c for c, t in self._clients.items() if end - t <= CLIENT_ACTIVE_S}
        return self._untold

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
        self._clients[envelope[0]] = time.monotonic()
        if len(self._clients) > self.max_parked:  # bounded: forget the longest quiet
            oldest = min(self._clients, key=self._clients.__getitem__)
            del self._clients[oldest]
        held = self.follower.held
        if held is not None and held.version > req.have:
            self._send_weights(envelope, req, held)
        elif req.wait_ms > 0 and len(self._parked) < self.max_parked and not self.finished:
            wait_s = min(req.wait_ms, self.max_wait_ms) / 1000
            self._parked.append(_Parked(envelope, req, time.monotonic() + wait_s))
        else:
            self._send_not_modified(envelope, req)

    def _release_parked(self) -> None:
        held = self.follower.held
        if (held is None and not self.finished) or not self._parked:
            return
        waiting = []
        for parked in self._parked:
            if held is not None and held.version > parked.request.have:
                self._send_weights(parked.envelope, parked.request, held)
            elif self.finished:
                self._send_not_modified(parked.envelope, parked.request)
            else:
                waiting.append(parked)
        self._parked = waiting

    def _expire_parked(self) -> None:
        if not self._parked:
            return
        now = time.monotonic()
        waiting = []
        for parked in self._parked:
            if parked.deadline <= now:
                self._send_not_modified(parked.envelope, parked.request)
            else:
                waiting.append(parked)
        self._parked = waiting

    def _poll_timeout_ms(self) -> int:
        timeout = TICK_S
        if self._parked:
            soonest = min(p.deadline for p in self._parked) - time.monotonic()
            timeout = min(timeout, max(soonest, 0.0))
        return max(1, int(timeout * 1000))

    # --- replies ----------------------------------------------------------------------

    def _told(self, envelope: list[bytes]) -> None:
        if self.finished:
            self._pending().discard(envelope[0])

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


def _register_metrics(server: WeightServer) -> None:
    """Export the server's counters on /metrics, read at scrape time."""
    from prometheus_client import REGISTRY
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class _Collector:
        def collect(self) -> Any:
            stats = server.stats()
            yield GaugeMetricFamily(
                "ppomq_weightserver_version", "Weights version held", value=stats["version"] or -1
            )
            yield GaugeMetricFamily(
                "ppomq_weightserver_redis_up", "1 if Redis answered last time", stats["redis_up"]
            )
            replies = CounterMetricFamily(
                "ppomq_weightserver_replies", "Replies sent, by status", labels=["status"]
            )
            for status, n in server.counters.items():
                if status != "requests":
                    replies.add_metric([status], n)
            yield replies

    REGISTRY.register(_Collector())


def main(settings: WeightserverSettings) -> int:
    """`ppomq weightserver`: settings → logging → socket → loop. Exit 0 once its run is
    marked finished (by itself after FINISH_GRACE_S, or at a stop signal after the mark);
    stopped by a signal before that, 128 + the signal (143 for SIGTERM)."""
    setup_logging(settings.log_level, settings.log_json, "weightserver")
    # A bad key file, or a bind beyond loopback without CURVE: one line, exit 2, at start.
    curve = server_from_settings(settings, bind=settings.bind, bind_flag="--bind")
    try:
        server = WeightServer(
            redis_url=settings.redis_url,
            run_id=settings.run_id,
            bind=settings.bind,
            poll_interval_s=settings.poll_interval_s,
            curve=curve,
        )
    except zmq.ZMQError as exc:
        raise UserError(f"cannot bind --bind {settings.bind}: {exc}") from None

    if settings.metrics_port:
        _register_metrics(server)
    # The serve loop polls its own stop event: the first signal sets it (server.stop).
    with service_shell(
        "weightserver", metrics_port=settings.metrics_port, unit_of_work="the current reply",
        on_stop=server.stop,
    ) as stop:  # fmt: skip
        log.info(
            "weightserver for run %r listening on %s (Redis %s)%s",
            settings.run_id,
            server.endpoint,
            redact_url(settings.redis_url),
            f", CURVE, allow-list {curve.allowed_dir}" if curve else "",
        )
        try:
            server.serve_forever()
        finally:
            server.close()
    return stop.exit_code(finished=server.finished)


__all__ = ["Held", "VersionFollower", "WeightServer", "main"]
