"""A TCP proxy in front of a real redis-server that can lose the reply to a committed EXEC.

What a dropped connection after a commit looks like to a client: the transaction ran on
the server, the client saw the connection close instead of the reply. Only loopback.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class LostExecReplyProxy:
    """Forwards 127.0.0.1:`port` to the Redis at `upstream_port`. While `armed`, the first
    EXEC's reply is swallowed and that client connection closed; later ones pass."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            exec_sent = threading.Event()
            threading.Thread(
                target=self._pump, args=(client, upstream, exec_sent, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(upstream, client, exec_sent, False), daemon=True
            ).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, exec_sent: threading.Event, to_redis: bool
    ) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if to_redis and self.armed.is_set() and b"EXEC" in data.upper():
                    exec_sent.set()
                elif not to_redis and exec_sent.is_set():
                    # The server has committed; the client never hears it.
                    self.armed.clear()
                    self.dropped.set()
                    break
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._closing = True
        self.listener.close()
