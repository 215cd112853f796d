"""VersionFollower: the run's newest weights from Redis, held in memory for the server.

It wakes on the pub/sub announcement and also polls (announcements are fire-and-forget:
one sent while it was reconnecting is lost). If Redis goes away it keeps what it holds,
logs it once, and reconnects with exponential backoff. It also watches the run's
`finished` marker (finished_marker.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import zmq

from ppomq.core.settings import redact_url
from ppomq.core.store.connect import REDIS_FAILURES, RedisRetry, describe_redis_error, make_redis
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import VersionNotFoundError, WeightStore
from ppomq.proto.errors import DecodeError, Reason
from ppomq.proto.weights_blob import WeightsHeader, decode_weights
from ppomq.weightserver.finished_marker import FinishedMarker, MarkerSeen
from ppomq.weightserver.run_end import FINISH_GRACE_S

log = logging.getLogger("ppomq.weightserver")

FOLLOW_RETRY = RedisRetry(first_s=0.1, cap_s=5.0)
# Nothing can wake the follower's wait on Redis and close() joins it, so this bounds how
# long a stopping weightserver takes (the end of every `ppomq train` waits for it).
FOLLOW_TICK_S = 0.05


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
    corrupt version in Redis is logged and skipped instead of reaching the actors. Each
    change the server must act on (a new version, the run's end) is also sent as an empty
    message to `wake_endpoint`.
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
        # When this run's end was seen (monotonic), read by the serving thread.
        self.finished_at: float | None = None
        self._ctx = context
        self._wake_endpoint = wake_endpoint
        self._stop_event = stop
        self._down_since: float | None = None
        self._bad_versions: set[int] = set()
        self._said_empty = False
        self._said_behind = False
        self._marker = FinishedMarker()

    def run(self) -> None:
        wake = self._ctx.socket(zmq.PUSH)
        wake.setsockopt(zmq.LINGER, 0)
        wake.connect(self._wake_endpoint)
        failures = 0
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
                    failures = 0
                    self._wait_for_announcement(pubsub)
                except Exception as exc:
                    # Whatever it was (Redis gone, ACL, a bad key), drop the connection and
                    # retry later: serving what we hold matters more than this thread.
                    self._mark_down(exc)
                    _close_quietly(pubsub, client)
                    client = pubsub = None
                    failures += 1
                    self._stop_event.wait(FOLLOW_RETRY.pause_s(failures))
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
            _wake(wake)
            return

    def _check_finished(self, client: Any, wake: zmq.Socket) -> None:
        if self._marker.ended:
            return
        raw = client.get(RunKeys(self.run_id).finished)
        seen = self._marker.observe(raw)
        if seen is MarkerSeen.EARLIER_RUN:
            log.info("run %r is marked finished by an earlier learner; serving it until "
                     "a new run starts on it", self.run_id)  # fmt: skip
        elif seen is MarkerSeen.RUN_ENDED:
            assert raw is not None
            self.finished_at = time.monotonic()
            log.info("run %r finished (%s): telling actors for %.0f s, then exiting",
                     self.run_id, raw.decode(errors="replace"), FINISH_GRACE_S)  # fmt: skip
            _wake(wake)  # the parked long polls hear it now

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
                    FOLLOW_RETRY.cap_s,
                )
            else:
                log.exception("reading Redis failed; still serving %s; will retry", serving)
            self._down_since = time.monotonic()
        else:
            log.debug("Redis still unavailable: %s", exc)
        self.redis_up = False


def _wake(wake: zmq.Socket) -> None:
    with contextlib.suppress(zmq.Again):  # a wake-up is already queued: enough
        wake.send(b"", zmq.NOBLOCK)


def _close_quietly(*things: Any) -> None:
    for thing in things:
        if thing is None:
            continue
        with contextlib.suppress(Exception):  # closing a broken connection may raise
            thing.close()
