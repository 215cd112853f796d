"""Redis restarted under a running system: persistence keeps every published version, and
training goes on by itself once Redis is back.

Redis runs as in docker-compose.yml (append-only file on, deploy/redis/users.acl) and is
stopped with SIGTERM, as `docker compose restart redis` or a node drain does, then started
again on the same port and data dir. The learner, the weightserver and two actors are
separate processes that nobody restarts. The binary is the suite's (Debian's redis-server
when installed, as in CI, or $PPOMQ_REDIS_SERVER): Redis 7 replays the learner's
MULTI/EXECs with the ACL of the shipped `default` user, Redis 6.2 does not.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from ..conftest import REPO
from .services import STOPPED_BY_SIGTERM, Service, System, max_update_gap

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# What each service logs when it finds Redis gone (the learner's status write every second,
# or a publish; the weightserver's follower).
LEARNER_REDIS_DOWN = ("could not write status to Redis", "Redis unreachable")
WEIGHTSERVER_REDIS_DOWN = "reconnecting with backoff"
# Far above what the test publishes, so retention drops nothing: every version the learner
# ever published must still be in Redis at the end.
KEEP_VERSIONS = 100_000
# The System gives every service one URL, so one user with the learner's and the reader's
# rules together stands in for both. What matters here is the shipped `default` user: at
# start Redis replays the append-only file as that user, whoever wrote it.
OPS_USER = (
    "user ppomq-ops on >pw-ops resetkeys ~ppomq:* resetchannels &ppomq:*:weights -@all "
    "+@read +@write +@transaction +publish +subscribe +unsubscribe +ping -@dangerous"
)


def _shipped_acl_with_ops_user(tmp_path: Path) -> Path:
    """deploy/redis/users.acl (its placeholder users switched off) plus OPS_USER."""
    shipped = (REPO / "deploy" / "redis" / "users.acl").read_text()
    lines = [line.replace(" on >CHANGE-ME-", " off >CHANGE-ME-") for line in shipped.splitlines()]
    path = tmp_path / "users.acl"
    path.write_text("\n".join([*lines, OPS_USER]) + "\n")
    return path


def _digests(system: System, versions: list[int]) -> dict[int, str]:
    """SHA-256 of each version's stored header and blob, read back from Redis."""
    out = {}
    for v in versions:
        fields = system.redis.hgetall(system.keys.weights(v))
        if b"header" not in fields or b"blob" not in fields:
            out[v] = "missing"
            continue
        out[v] = hashlib.sha256(fields[b"header"] + fields[b"blob"]).hexdigest()
    return out


def test_redis_restart_loses_no_version_and_training_resumes(start_redis, tmp_path: Path):
    server = start_redis(
        "--appendonly", "yes", "--appendfsync", "everysec",
        "--aclfile", str(_shipped_acl_with_ops_user(tmp_path)),
    )  # fmt: skip
    redis_url = server.url_for("ppomq-ops", "pw-ops")
    seen_latest: list[int] = []

    def latest() -> int | None:
        v = system.latest()
        if v is not None:
            seen_latest.append(v)
        return v

    try:
        with System(
            tmp_path, redis_url, run_id="redis-restart",
            learner_args=["--keep-versions", str(KEEP_VERSIONS)],
        ) as system:  # fmt: skip
            system.start()
            system.wait_for(lambda: (latest() or 0) >= 5, timeout_s=120, what="5 versions")
            system.wait_for(
                lambda: len(system.actor_entries()) == 2, timeout_s=60, what="both actors"
            )
            actor_ids = set(system.actor_entries())
            before = _digests(system, system.versions())
            v_before = max(before)

            logged = {s.name: len(s.full_log()) for s in (system.learner, system.weightserver)}

            def felt_by(service: Service, *lines: str) -> bool:
                return any(line in service.full_log()[logged[service.name] :] for line in lines)

            server.stop()  # SIGTERM: Redis writes its append-only file out and exits
            down_at = time.monotonic()
            # Down until the learner and the weightserver have each failed to reach it (and
            # nobody crashed over it): an outage they lived through, not one they slept past.
            system.wait_for(
                lambda: (
                    felt_by(system.learner, *LEARNER_REDIS_DOWN)
                    and felt_by(system.weightserver, WEIGHTSERVER_REDIS_DOWN)
                ),
                timeout_s=60,
                what="the learner and the weightserver to see Redis down",
            )
            outage_s = time.monotonic() - down_at
            server.start()  # same port, same dir: it loads the append-only file

            # Persistence: every version stored before the stop is there, byte for byte.
            assert _digests(system, sorted(before)) == before
            first_after = latest()
            assert first_after is not None and first_after >= v_before

            # Training resumes by itself: a version above anything published before.
            v_stop = max(system.versions())  # the learner may have published up to the stop
            resumed_s = system.wait_for(
                lambda: (latest() or 0) > v_stop, timeout_s=60, what="a new version"
            )
            resumed_at, resumed_unix = time.monotonic(), time.time()
            accepted = system.stats()["batches_accepted"]

            def both_actors_sent_again() -> bool:
                entries = system.actor_entries()
                return system.stats()["batches_accepted"] >= accepted + 4 and all(
                    entries[a]["last_seen"] > resumed_unix for a in actor_ids
                )

            # ...on batches of the same two actor processes (ids are per process): they
            # kept running through the outage and nobody restarted them.
            system.wait_for(both_actors_sent_again, timeout_s=60, what="both actors' batches")
            v_end = latest()
            assert system.learner.stop(timeout=120) == STOPPED_BY_SIGTERM, system.learner.log()

            # Every version the learner trained (progress.csv, one row per published update)
            # and its first one are in Redis: none was lost to the outage.
            rows = system.progress()
            trained = {int(r["version"]) for r in rows}
            stored = set(system.versions())
            assert trained and not (trained - stored), sorted(trained - stored)
            assert min(before) in stored
            # `latest` never went backwards, seen from outside.
            assert seen_latest == sorted(seen_latest), seen_latest
            gap, gap_end = max_update_gap(rows, after_version=v_before - 1)
            print(
                f"\nRELIABILITY redis-restart: Redis down {outage_s:.1f} s; first new version "
                f"{resumed_s:.2f} s after Redis was back ({resumed_at - down_at:.2f} s after "
                f"it went down); longest gap between updates {gap:.2f} s (ending at version "
                f"{int(gap_end)}); versions {min(before)}..{v_end}, none lost "
                f"({len(trained)} trained, all stored)"
            )
    finally:
        server.stop()
