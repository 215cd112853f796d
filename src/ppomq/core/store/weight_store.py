"""The versioned weight store in Redis: publish, fetch, list, verify, protect, retention.

The learner publishes through it; the weightserver and `ppomq weights` read through it.
Key names come from keys.py; the values are the weights message of proto/weights_blob.py.
Redis failures surface as redis-py exceptions; callers that face a user wrap them with
`ppomq.core.store.connect.redis_errors`.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from ppomq.core.errors import NotFoundError
from ppomq.core.store.keys import BLOB_FIELD, HEADER_FIELD, RUNS_KEY, RunKeys
from ppomq.proto.errors import DecodeError
from ppomq.proto.weights_blob import (
    WeightsHeader,
    blob_digest,
    decode_weights,
    parse_weights_header,
)


class VersionNotFoundError(NotFoundError):
    """The run holds no such version (exit 3)."""


class RunNotFoundError(NotFoundError):
    """No such run in this Redis (exit 3)."""


class StaleVersionError(ValueError):
    """A publish whose version is not above the stored `latest` (actors would ignore it)."""


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """One row of `list_versions`: the header (None if unreadable) and its flags."""

    version: int
    header: WeightsHeader | None
    protected: bool
    latest: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class VerifyResult:
    version: int
    ok: bool
    expected_sha256: str
    actual_sha256: str | None
    reason: str | None = None


def list_runs(client: redis.Redis) -> list[str]:
    """Run ids that have published at least once into this Redis, sorted."""
    return sorted(m.decode() for m in client.smembers(RUNS_KEY))


class WeightStore:
    """The weight versions of one run in Redis.

    Keyword `keep_versions`: retention keeps the newest K versions plus the protected ones
    (and only the learner, which publishes, runs retention).
    """

    def __init__(self, client: redis.Redis, run_id: str, keep_versions: int = 20) -> None:
        if keep_versions < 1:
            raise ValueError("keep_versions must be >= 1: the latest version is always kept")
        self.client = client
        self.run_id = run_id
        self.keep_versions = keep_versions
        self.keys = RunKeys(run_id)

    # --- writing (the learner) ---------------------------------------------------------

    def publish(self, header: WeightsHeader, blob: bytes | memoryview) -> list[int]:
        """Store `header`+`blob` as version `header.version`, make it `latest`, announce it.

        Idempotent: publishing the very same header again (a retry after a commit whose
        reply was lost) completes the announcement and returns, rather than failing as
        stale; another header under a version that is not above `latest` still fails.

        The hash, the index and `latest` change in one MULTI/EXEC, so no reader ever sees
        `latest` pointing at a version that is not there. WATCH on `latest` makes the
        version check part of that transaction: a version must be above `latest`, because
        every reader only moves forward. Returns the versions retention then deleted.
        """
        if header.blob_size != len(blob):
            raise ValueError(f"blob is {len(blob)} bytes, header says {header.blob_size}")
        version = header.version
        header_bytes = header.pack()
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self.keys.latest)
                    current = pipe.get(self.keys.latest)
                    if (
                        current is not None
                        and int(current) == version
                        and self._holds(pipe, version, header_bytes)
                    ):
                        # Our own earlier attempt committed and only its reply was lost
                        # (the connection dropped after EXEC): finish it, don't fail it.
                        pipe.unwatch()
                        break
                    if current is not None and int(current) >= version:
                        raise StaleVersionError(
                            f"run {self.run_id!r}: version {version} is not above latest "
                            f"{int(current)}; publish version {int(current) + 1} or later"
                        )
                    pipe.multi()
                    pipe.hset(
                        self.keys.weights(version),
                        mapping={HEADER_FIELD: header_bytes, BLOB_FIELD: bytes(blob)},
                    )
                    pipe.zadd(self.keys.versions, {str(version): version})
                    pipe.set(self.keys.latest, version)
                    pipe.sadd(RUNS_KEY, self.run_id)
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue  # someone else moved `latest`: check again
        # After EXEC, never before: a subscriber that reacts at once finds the version.
        self.client.publish(self.keys.channel, str(version))
        return self.apply_retention()

    def _holds(self, client: redis.Redis, version: int, header_bytes: bytes) -> bool:
        """Whether `version` is stored with exactly this header (same sha256, same time)."""
        return client.hget(self.keys.weights(version), HEADER_FIELD) == header_bytes

    def apply_retention(self) -> list[int]:
        """Delete every version that is neither among the newest K nor protected.

        WATCH on the index and the protected set: a concurrent `protect` or publish makes
        EXEC fail and the choice is made again, so a version protected a moment ago is
        never deleted.
        """
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self.keys.versions, self.keys.protected)
                    versions = [int(v) for v in pipe.zrange(self.keys.versions, 0, -1)]
                    protected = {int(v) for v in pipe.smembers(self.keys.protected)}
                    keep = set(versions[-self.keep_versions :]) | protected
                    drop = [v for v in versions if v not in keep]
                    if not drop:
                        pipe.unwatch()
                        return []
                    pipe.multi()
                    pipe.delete(*(self.keys.weights(v) for v in drop))
                    pipe.zrem(self.keys.versions, *(str(v) for v in drop))
                    pipe.execute()
                    return drop
                except redis.WatchError:
                    continue

    def protect(self, version: int) -> bool:
        """Exempt `version` from retention. False if it was protected already."""
        key = self.keys.weights(version)
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    # WATCH the version itself: if retention deletes it between our check
                    # and SADD, EXEC fails and the retry reports it missing.
                    pipe.watch(key)
                    if not pipe.exists(key):
                        pipe.unwatch()
                        raise self._missing(version)
                    pipe.multi()
                    pipe.sadd(self.keys.protected, version)
                    added = pipe.execute()[0]
                    return bool(added)
                except redis.WatchError:
                    continue

    def unprotect(self, version: int) -> bool:
        """Let retention delete `version` again (at the next publish). False if it was not
        protected; `VersionNotFoundError` if it is neither protected nor stored."""
        removed = self.client.srem(self.keys.protected, version)
        if not removed and not self.client.exists(self.keys.weights(version)):
            raise self._missing(version)
        return bool(removed)

    # --- reading (weightserver, CLI, learner resume) ---------------------------------

    def exists(self) -> bool:
        """Whether this run has ever published into this Redis."""
        return bool(
            self.client.sismember(RUNS_KEY, self.run_id) or self.client.exists(self.keys.latest)
        )

    def require_run(self) -> None:
        """`RunNotFoundError` naming the runs that do exist, unless this one does."""
        if self.exists():
            return
        known = list_runs(self.client)
        hint = f"runs here: {', '.join(known[:10])}" if known else "no runs have published here"
        raise RunNotFoundError(f"no run {self.run_id!r} in Redis ({hint}); check --run-id")

    def latest_version(self) -> int | None:
        raw = self.client.get(self.keys.latest)
        return None if raw is None else int(raw)

    def fetch_raw(self, version: int) -> tuple[bytes, bytes]:
        """The stored header bytes and blob of `version`, unparsed."""
        header_bytes, blob = self.client.hmget(self.keys.weights(version), HEADER_FIELD, BLOB_FIELD)
        if header_bytes is None or blob is None:
            raise self._missing(version)
        return header_bytes, blob

    def fetch(self, version: int, *, verify: bool = False) -> tuple[WeightsHeader, bytes]:
        """Header and blob of `version`; with `verify`, the sha256 is checked too."""
        header_bytes, blob = self.fetch_raw(version)
        if verify:
            header, _ = decode_weights([header_bytes, blob], verify=True)
            return header, blob
        return parse_weights_header(header_bytes), blob

    def fetch_latest(self, *, verify: bool = False) -> tuple[WeightsHeader, bytes] | None:
        """The newest version, or None when the run has none."""
        for _ in range(5):
            version = self.latest_version()
            if version is None:
                return None
            try:
                return self.fetch(version, verify=verify)
            except VersionNotFoundError:
                continue  # a newer publish and its retention overtook us: read latest again
        raise VersionNotFoundError(f"run {self.run_id!r}: latest version keeps disappearing")

    def fetch_header(self, version: int) -> WeightsHeader:
        raw = self.client.hget(self.keys.weights(version), HEADER_FIELD)
        if raw is None:
            raise self._missing(version)
        return parse_weights_header(raw)

    def protected_versions(self) -> set[int]:
        return {int(v) for v in self.client.smembers(self.keys.protected)}

    def list_versions(self) -> list[VersionInfo]:
        """Every stored version, oldest first, reading headers only (never blobs)."""
        versions = [int(v) for v in self.client.zrange(self.keys.versions, 0, -1)]
        with self.client.pipeline(transaction=False) as pipe:
            for v in versions:
                pipe.hget(self.keys.weights(v), HEADER_FIELD)
            raw_headers = pipe.execute()
        protected = self.protected_versions()
        latest = self.latest_version()
        rows = []
        for v, raw in zip(versions, raw_headers, strict=True):
            header, error = None, None
            if raw is None:
                error = "indexed but missing from Redis"
            else:
                try:
                    header = parse_weights_header(raw)
                except DecodeError as exc:
                    error = f"unreadable header: {exc}"
            rows.append(VersionInfo(v, header, v in protected, v == latest, error))
        return rows

    def verify(self, version: int) -> VerifyResult:
        """Recompute the blob's sha256 and check the header against the blob."""
        header_bytes, blob = self.fetch_raw(version)
        try:
            header = parse_weights_header(header_bytes)
        except DecodeError as exc:
            return VerifyResult(version, False, "", None, f"header: {exc}")
        try:
            decode_weights([header_bytes, blob], verify=True)
        except DecodeError as exc:
            return VerifyResult(version, False, header.sha256, blob_digest(blob), str(exc))
        if header.version != version:
            return VerifyResult(
                version,
                False,
                header.sha256,
                header.sha256,
                f"stored under {version} but its header says {header.version}",
            )
        return VerifyResult(version, True, header.sha256, header.sha256)

    def _missing(self, version: int) -> VersionNotFoundError:
        return VersionNotFoundError(
            f"run {self.run_id!r} has no version {version} "
            "(never published, or deleted by retention; see `ppomq weights list`)"
        )


__all__ = [
    "RunNotFoundError",
    "StaleVersionError",
    "VerifyResult",
    "VersionInfo",
    "VersionNotFoundError",
    "WeightStore",
    "list_runs",
]
