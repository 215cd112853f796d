"""A run's Redis, opened from its run dir for the CLI's readers: `ppomq weights --run-dir`
and `ppomq status --run-dir`.

While the run runs, that is its own server (the URL in RUN_DIR/settings.json, checked to be
the server of this run dir). After it, it is a private redis-server started on a temporary
copy of what the run's embedded Redis persisted (RUN_DIR/redis/), stopped and removed once
read: reading a finished run never changes a byte of its run dir, and never races a
`ppomq train --run-dir` that resumes it meanwhile on the original files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from pydantic import Secret

from ppomq.core.errors import NotFoundError, UsageError, UserError
from ppomq.core.rundir import RUNS_ROOT
from ppomq.core.settings.secrets import REDACTED, redact_url
from ppomq.core.store.connect import make_redis
from ppomq.core.store.embedded import (
    LOAD_TIMEOUT_S,
    RedisProcess,
    RedisStartError,
    free_port,
    local_server_binary,
)

LIVE = "live"  # the run's own Redis, answering at the URL its settings.json records
PERSISTED = "persisted"  # a private server on a copy of the run's persisted data
# How long the check for a live run waits: its embedded Redis is on loopback, where a
# stopped server refuses the connection at once.
LIVE_PROBE_TIMEOUT_S = 1.0
_ABSENT = object()


@dataclass(frozen=True)
class RunRedis:
    """Where to read a run's keys, and whether that is the run itself or a copy."""

    url: str
    run_id: str
    source: str  # LIVE or PERSISTED
    run_dir: Path

    def require_writable(self, what: str) -> None:
        """A one-line UsageError when `what` would write to a finished run's data."""
        if self.source == PERSISTED:
            raise UsageError(
                f"{what}: run {self.run_id!r} in {self.run_dir} is not running, and its "
                "persisted versions are read-only (retention deletes versions only while a "
                "run publishes, so a finished run's stay as they are); use it while the run "
                "runs, e.g. after `ppomq train --run-dir` resumes it"
            )


def read_run_settings(run_dir: Path) -> dict[str, Any]:
    """RUN_DIR/settings.json, or a one-line NotFoundError saying what the path is not."""
    if not run_dir.is_dir():
        raise NotFoundError(f"run dir {run_dir} not found; check the path")
    path = run_dir / "settings.json"
    if not path.is_file():
        raise NotFoundError(
            f"{run_dir} is not a ppomq run dir (no settings.json); pass the directory "
            "`ppomq train` printed as its run dir"
        )
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NotFoundError(
            f"{path} is unreadable ({exc}); is {run_dir} a ppomq run dir?"
        ) from None
    if not isinstance(doc, dict) or not {"run_id", "redis_url"} <= doc.keys():
        raise NotFoundError(f"{path} names no run_id and redis_url; is {run_dir} a ppomq run dir?")
    return doc


@contextlib.contextmanager
def open_run_redis(
    run_dir: Path, *, redis_url: str | None = None, run_id: str | None = None
) -> Iterator[RunRedis]:
    """The Redis holding the run in `run_dir`: live, or a private copy while the block runs.

    `redis_url` stands in for a recorded URL whose password settings.json left out (a run
    on an external Redis with credentials); `run_id` overrides the recorded one."""
    settings = read_run_settings(run_dir)
    run_id = run_id or str(settings["run_id"])
    recorded = str(settings["redis_url"])
    data_dir_name = settings.get("redis_data_dir", _ABSENT)
    if not isinstance(data_dir_name, str):
        # An external Redis (null), or a run dir from before runs kept their Redis data.
        url = _recorded_url(recorded, redis_url, run_dir)
        if data_dir_name is _ABSENT and _on_loopback(url):
            # Its embedded Redis, gone with it. Not probed: that loopback port may since
            # be another run's Redis, holding another run under the same (default) id.
            raise NotFoundError(
                f"{run_dir} keeps no copy of its weight versions (it is from before `ppomq "
                f"train` kept them in the run dir) and its Redis at {redact_url(url)} is "
                "gone with it; `ppomq eval --run-dir` still reads its final_weights.pt"
            )
        yield RunRedis(url, run_id, LIVE, run_dir)  # down: the readers' usual exit 4
        return
    data_dir = run_dir / data_dir_name
    if _serves(recorded, data_dir):
        yield RunRedis(recorded, run_id, LIVE, run_dir)
        return
    if not _holds_data(data_dir):
        raise NotFoundError(
            f"{data_dir} holds no persisted Redis data (removed, or the run stopped before "
            "its Redis stored anything), so the run's versions are gone"
        )
    with serve_copy(data_dir) as url:
        yield RunRedis(url, run_id, PERSISTED, run_dir)


@contextlib.contextmanager
def serve_copy(data_dir: Path) -> Iterator[str]:
    """A private redis-server on a temporary copy of `data_dir`, for the block; its URL."""
    local_server_binary()  # no redis-server: the one-line hint, before copying anything
    tmp = Path(tempfile.mkdtemp(prefix="ppomq-run-redis-"))
    try:
        copy = tmp / "data"
        shutil.copytree(data_dir, copy, symlinks=True)
        server = RedisProcess(free_port(), copy, persist=True, log_path=tmp / "redis.log")
        try:
            server.start(timeout_s=LOAD_TIMEOUT_S)
        except RedisStartError as exc:  # its log is in the copy, about to be removed
            raise UserError(
                f"redis-server cannot load the Redis data in {data_dir}: {exc.reason}"
            ) from None
        try:
            yield server.url
        finally:
            server.stop(kill=True)  # a copy: nothing of it is to be kept
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def newest_run_dir(root: Path = RUNS_ROOT, *, run_id: str | None = None) -> Path | None:
    """The run dir under `root` that `ppomq train` started or resumed last (the newest
    settings.json, which each start writes), of run `run_id` when given; None if none."""
    newest: tuple[float, Path] | None = None
    try:
        entries = list(root.iterdir())
    except OSError:  # no runs/ here
        return None
    for entry in entries:
        settings = entry / "settings.json"
        try:
            mtime = settings.stat().st_mtime
            if run_id is not None and json.loads(settings.read_text()).get("run_id") != run_id:
                continue
        except (OSError, ValueError, AttributeError):
            continue  # not a run dir (a `ppomq bench compare` output), or not readable
        if newest is None or mtime > newest[0]:
            newest = (mtime, entry)
    return newest[1] if newest else None


def run_dir_to_read(
    run_dir: Path | None, redis_url: str | None, run_id: str | None, *, as_json: bool
) -> tuple[Path | None, bool]:
    """The run dir a reader (`ppomq status`, `ppomq weights`) reads, and whether it was told
    neither a run dir nor a Redis URL. Told nothing, it reads the run `ppomq train` started
    last here (of `run_id` when given) and says so first (on stderr under --json, whose
    stdout is one document); finding none, it goes on to the default Redis, as a
    deployment's (compose) is reached."""
    told_nothing = run_dir is None and not (redis_url or os.environ.get("PPOMQ_REDIS_URL"))
    if not told_nothing:
        return run_dir, False
    newest = newest_run_dir(run_id=run_id or os.environ.get("PPOMQ_RUN_ID"))
    if newest is not None:
        print(
            f"run dir {newest} (the newest under {RUNS_ROOT}/; --run-dir RUN_DIR reads another)",
            file=sys.stderr if as_json else sys.stdout,
        )
    return newest, True


def no_run_found(url: str | Secret[str], root: Path = RUNS_ROOT) -> NotFoundError:
    """Told no run, finding none under `root` and no Redis at the default `url`."""
    return NotFoundError(
        f"no run found (no run dir under {root}/, no Redis at {redact_url(url)}); "
        "pass --run-dir RUN_DIR or --redis-url URL"
    )


def _recorded_url(recorded: str, given: str | None, run_dir: Path) -> str:
    """The recorded URL; `given` (or PPOMQ_REDIS_URL) where the recorded one lost its
    password to redaction (settings.json keeps no secret)."""
    if f":{REDACTED}@" not in recorded:
        return recorded
    given = given or os.environ.get("PPOMQ_REDIS_URL")
    if not given:
        raise UsageError(
            f"{run_dir / 'settings.json'} records Redis at {recorded} without its password; "
            "pass --redis-url or PPOMQ_REDIS_URL as well"
        )
    return given


def _on_loopback(url: str) -> bool:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host in ("127.0.0.1", "localhost", "::1")


def _serves(url: str, data_dir: Path) -> bool:
    """True when the server at `url` answers and keeps its data in `data_dir`: the run is
    live. A finished run's loopback port may since belong to another run's Redis."""
    client = make_redis(url, timeout_s=LIVE_PROBE_TIMEOUT_S)
    try:
        reply = client.config_get("dir")  # redis-py gives str keys, bytes values or str
        served = reply.get("dir", reply.get(b"dir"))
    except redis.RedisError:
        return False
    finally:
        client.close()
    return served is not None and Path(os.fsdecode(served)).resolve() == data_dir.resolve()


def _holds_data(data_dir: Path) -> bool:
    return data_dir.is_dir() and any(p.is_file() and p.stat().st_size for p in data_dir.rglob("*"))


__all__ = [
    "LIVE",
    "PERSISTED",
    "RunRedis",
    "newest_run_dir",
    "no_run_found",
    "open_run_redis",
    "read_run_settings",
    "run_dir_to_read",
    "serve_copy",
]
