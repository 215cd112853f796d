"""ZeroMQ CURVE on the data plane (required beyond loopback): key files, the ZAP
allow-list, the actor id rule.

- The binding sides (learner PULL, weightserver ROUTER) are CURVE servers with the server's
  secret certificate; a ZAP handler (pyzmq's `ThreadAuthenticator`, one per context) admits
  only client keys whose public certificate is in the allow-list directory.
- The connecting sides (actor PUSH, weights DEALER) are CURVE clients with their own secret
  certificate and the server's public one.
- Identity: libzmq stamps every message with the ZAP User-Id, which pyzmq's authenticator
  sets to the client's Z85 public key. Under CURVE an actor's id ends with
  `-k` + the first 10 hex digits of sha256(the raw 32-byte public key) (`key_suffix`), and
  the learner refuses a batch whose id does not end with its sender's key suffix
  (`actor_id_not_key`, proto/ROLLOUT.md "Authentication").

Certificates are ZeroMQ's format (`zmq.auth.create_certificates`): NAME.key holds the
public key, NAME.key_secret both keys. Every problem with them is a one-line UsageError.

A failed handshake (a key not on the allow-list, another server's public key, a peer
without CURVE) is logged on both ends with its likely cause and counted
(`HandshakeWatch`, `handshake_failures`; /metrics in ppomq.core.metrics).
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import logging
import os
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.utils import z85

from ppomq.core.errors import UsageError

KEY_SUFFIX_HEX = 10
log = logging.getLogger("ppomq.core.transport.curvezmq")


@dataclass(frozen=True)
class CurveServer:
    """What a binding socket needs: its key pair and the allow-list directory."""

    public: bytes
    secret: bytes
    allowed_dir: str


@dataclass(frozen=True)
class CurveClient:
    """What a connecting socket needs: its key pair and the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes


def key_suffix(public_z85: bytes | str) -> str:
    """`-k` + the first 10 hex digits of sha256 of the raw 32-byte public key."""
    if isinstance(public_z85, str):
        public_z85 = public_z85.encode("ascii")
    raw = z85.decode(public_z85)
    return "-k" + hashlib.sha256(raw).hexdigest()[:KEY_SUFFIX_HEX]


def actor_id_matches_key(actor_id: str, public_z85: bytes | str) -> bool:
    try:
        return actor_id.endswith(key_suffix(public_z85))
    except (ValueError, TypeError):
        return False


def _check_z85(key: bytes | None, path: str, what: str) -> bytes:
    try:
        if key is None or len(key) != 40 or len(z85.decode(key)) != 32:
            raise ValueError
    except (ValueError, TypeError, KeyError):
        raise UsageError(
            f"{what} {path}: no valid CURVE {('secret' if 'secret' in what else 'public')} key "
            "in it; write it again with `ppomq keys generate`"
        ) from None
    return key


def _load(path: str, setting: str, *, secret: bool) -> tuple[bytes, bytes | None]:
    what = f"{setting} file"
    p = Path(path)
    if not p.is_file():
        raise UsageError(
            f"{what} {path} not found; check --{setting.replace('_', '-')} "
            "(`ppomq keys generate --out DIR` writes the keys)"
        )
    try:
        public, sec = zmq.auth.load_certificate(p)
    except OSError as exc:
        raise UsageError(
            f"{what} {path} cannot be read ({exc.strerror}); fix its permissions"
        ) from None
    except Exception:  # malformed: pyzmq raises ValueError, or worse on binary junk
        raise UsageError(
            f"{what} {path} is not a ZeroMQ certificate; write it again with `ppomq keys generate`"
        ) from None
    _check_z85(public, path, what)
    if secret:
        if sec is None:
            raise UsageError(
                f"{what} {path} holds no secret key (a public .key file?); "
                "give the NAME.key_secret file"
            )
        _check_z85(sec, path, what + " (secret key)")
    return public, sec


def _half(names: tuple[str, str], values: tuple[str, str]) -> None:
    if bool(values[0]) != bool(values[1]):
        given, missing = (names[0], names[1]) if values[0] else (names[1], names[0])
        raise UsageError(
            f"CURVE is half configured: {given} is set but {missing} is not; set both "
            f"(--{missing.replace('_', '-')} / PPOMQ_{missing.upper()}) or neither"
        )


def is_loopback_bind(endpoint: str) -> bool:
    """True when only this machine can reach `endpoint`: tcp on 127.0.0.0/8, ::1 or
    localhost, or ipc/inproc (file permissions / the process guard those). `*`, 0.0.0.0,
    an interface name or any other address reaches beyond loopback."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        return False
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_from_settings(settings: Any, *, bind: str, bind_flag: str) -> CurveServer | None:
    """The learner's / weightserver's CURVE config, None when both settings are unset.

    On by default beyond loopback: a socket that binds where other hosts can reach it
    (`bind`, set by `bind_flag`) needs CURVE, or `insecure_plaintext` to say that anyone
    who reaches the port may send rollouts and read weights."""
    cert, allowed = settings.curve_server_cert, settings.curve_allowed_dir
    _half(("curve_server_cert", "curve_allowed_dir"), (cert, allowed))
    if not cert:
        if not is_loopback_bind(bind) and not settings.insecure_plaintext:
            raise UsageError(
                f"{bind_flag} {bind} reaches beyond loopback, and CURVE is off: give "
                "--curve-server-cert and --curve-allowed-dir (`ppomq keys generate --out "
                "DIR` writes them), bind 127.0.0.1, or pass --insecure-plaintext to let "
                "anyone who reaches the port in"
            )
        return None
    public, secret = _load(cert, "curve_server_cert", secret=True)
    d = Path(allowed)
    if not d.is_dir():
        raise UsageError(
            f"curve_allowed_dir {allowed} is not a directory; point it at the allow-list "
            "(`ppomq keys generate` writes DIR/allowed)"
        )
    certs = sorted(d.glob("*.key"))
    if not certs:
        raise UsageError(
            f"curve_allowed_dir {allowed} holds no public certificate (*.key): every actor "
            "would be refused; copy the actors' NAME.key files into it"
        )
    for c in certs:
        _load(str(c), "curve_allowed_dir", secret=False)
    assert secret is not None
    return CurveServer(public=public, secret=secret, allowed_dir=str(d))


def client_from_settings(settings: Any) -> CurveClient | None:
    """The actor's CURVE config, None when both settings are unset."""
    cert, server = settings.curve_actor_cert, settings.curve_server_public_cert
    _half(("curve_actor_cert", "curve_server_public_cert"), (cert, server))
    if not cert:
        return None
    public, secret = _load(cert, "curve_actor_cert", secret=True)
    server_public, _ = _load(server, "curve_server_public_cert", secret=False)
    assert secret is not None
    return CurveClient(public=public, secret=secret, server_public=server_public)


# --- sockets ---------------------------------------------------------------------------

_auth_lock = threading.Lock()
# context id -> [authenticator, allowed dir, users]
_authenticators: dict[int, list[Any]] = {}


def _acquire_authenticator(ctx: zmq.Context[Any], allowed_dir: str, server_public: bytes) -> None:
    from zmq.auth.thread import ThreadAuthenticator

    with _auth_lock:
        entry = _authenticators.get(id(ctx))
        if entry is not None:
            if entry[1] != allowed_dir:
                raise ValueError(
                    f"one ZAP allow-list per context: {entry[1]} already, not {allowed_dir}"
                )
            entry[2] += 1
            return
        # libzmq frees an inproc name asynchronously after close: an authenticator stopped
        # a moment ago (a receiver closed and reopened) may still hold the ZAP endpoint.
        deadline = time.monotonic() + 5.0
        while True:
            auth = ThreadAuthenticator(ctx)
            try:
                auth.start()
                break
            except zmq.ZMQError as exc:
                if auth.zap_socket is not None:
                    auth.zap_socket.close(linger=0)
                    auth.zap_socket = None  # type: ignore[assignment]
                if exc.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        auth.configure_curve(domain="*", location=allowed_dir)
        # The server's own key is allowed too: whoever holds its secret is the server
        # (the healthcheck in the server's own container pings with it, `self_client`).
        auth.certs.setdefault("*", {})[server_public] = True
        _authenticators[id(ctx)] = [auth, allowed_dir, 1]


def _release_authenticator(ctx: zmq.Context[Any]) -> None:
    with _auth_lock:
        entry = _authenticators.get(id(ctx))
        if entry is None:
            return
        entry[2] -= 1
        if entry[2] <= 0:
            del _authenticators[id(ctx)]
            entry[0].stop()


class ServerAuth:
    """Makes a binding socket a CURVE server behind the context's ZAP allow-list;
    `release()` (once) at the socket's close."""

    def __init__(self, sock: zmq.Socket[Any], curve: CurveServer) -> None:
        self._ctx = sock.context
        _acquire_authenticator(self._ctx, curve.allowed_dir, curve.public)  # before bind
        self._released = False
        HandshakeWatch(sock, "server", allowed_dir=curve.allowed_dir)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)

    def release(self) -> None:
        if not self._released:
            self._released = True
            _release_authenticator(self._ctx)


def self_client(server: CurveServer) -> CurveClient:
    """A client that holds the server's own key pair (allowed by every ServerAuth): what a
    probe running beside the server, with its files, connects with."""
    return CurveClient(public=server.public, secret=server.secret, server_public=server.public)


def make_client(sock: zmq.Socket[Any], curve: CurveClient) -> None:
    """Make a connecting socket a CURVE client (before connect); a failed handshake is
    logged with its likely cause and counted (`HandshakeWatch`)."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, curve.server_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, curve.secret)
    HandshakeWatch(sock, "client", key=key_suffix(curve.public))


def sender_key(frame: Any) -> str | None:
    """The authenticated client key (Z85) of a received zero-copy frame, None if none."""
    try:
        return frame.get("User-Id")
    except (zmq.ZMQError, AttributeError):
        return None


# --- failed handshakes -------------------------------------------------------------------
#
# A CURVE handshake that fails is silent at the socket API: the client's messages just
# never leave, the server never sees them. libzmq reports it only as a monitor event, so
# every CURVE socket gets a monitor, read by a daemon thread that names the likely cause
# (which side holds the wrong key), logs it and counts it (the /metrics counter
# ppomq_curve_handshake_failures_total{side, reason}, ppomq.core.metrics).

_FAILED_EVENTS = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
# Log a cause at once, then at most this often per (side, endpoint, cause) with the count:
# a refused client retries every 0.1-2 s, forever.
FAILURE_LOG_EVERY_S = 60.0
# On a client a handshake the server just drops (no detail) is, repeated, a wrong server
# key; once, it may be the server stopping mid-handshake, so it is named from the second.
_NO_DETAIL_REPEATS = 2

_failures_lock = threading.Lock()
_failures: Counter[tuple[str, str]] = Counter()
_logged_at: dict[tuple[str, str, str], float] = {}
_last_client_failure: list[str] = []
_watch_ids = itertools.count()


def handshake_failures() -> dict[tuple[str, str], int]:
    """Failed CURVE handshakes in this process so far: (side, reason) -> count."""
    with _failures_lock:
        return dict(_failures)


def last_client_failure() -> str | None:
    """What the last failed CURVE handshake of a client socket in this process said (its
    likely cause and what to do), None if none failed."""
    with _failures_lock:
        return _last_client_failure[0] if _last_client_failure else None


def _reason(side: str, event: int, value: int) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        # ZAP status 400: the allow-list refused the key (300, 500: the ZAP handler's own
        # trouble, not the key's).
        return "key_not_allowed" if value == 400 else "zap_error"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
            return "wrong_server_key"  # the hello (or welcome) was sealed for another key
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return "server_not_curve" if side == "client" else "client_not_curve"
        return "protocol_error"
    return "wrong_server_key" if side == "client" else "dropped"


def _describe(side: str, reason: str, endpoint: str, value: int, extra: str) -> str:
    if side == "client":
        return {
            "key_not_allowed": f"CURVE: {endpoint} refused this process's key ({extra}): it "
            "is not in the server's allow-list; copy its public NAME.key into the server's "
            "curve_allowed_dir, or give a key that is there (--curve-actor-cert)",
            "wrong_server_key": f"CURVE: the handshake with {endpoint} fails: the server "
            "cannot read our hello, so --curve-server-public-cert is most likely not that "
            "server's public key; give its server.key",
            "server_not_curve": f"CURVE: {endpoint} does not use CURVE (plain ZeroMQ): start "
            "it with --curve-server-cert and --curve-allowed-dir, or drop this process's "
            "--curve-* settings",
        }.get(reason, f"CURVE: the handshake with {endpoint} failed ({reason}, {value:#x})")
    return {
        "key_not_allowed": f"CURVE: refused a client on {endpoint}: its key is not in the "
        f"allow-list {extra}",
        "wrong_server_key": f"CURVE: refused a client on {endpoint}: it sealed its hello for "
        "another server key (its --curve-server-public-cert is not this server's)",
        "client_not_curve": f"CURVE: refused a client on {endpoint}: it does not use CURVE "
        "(plain ZeroMQ)",
        "dropped": f"CURVE: a client on {endpoint} left during the handshake (errno "
        f"{value}: a client without CURVE, a restart or a port probe)",
    }.get(reason, f"CURVE: a handshake on {endpoint} failed ({reason}, {value:#x})")


def _record(side: str, reason: str, text: str, endpoint: str) -> None:
    now = time.monotonic()
    with _failures_lock:
        _failures[side, reason] += 1
        if side == "client":
            _last_client_failure[:] = [text]
        key = (side, endpoint, reason)
        if now - _logged_at.get(key, -FAILURE_LOG_EVERY_S) < FAILURE_LOG_EVERY_S:
            return
        _logged_at[key] = now
        total = _failures[side, reason]
    if side == "server" and reason == "dropped":
        # A client gone mid-handshake (a port probe, a restart): counted, not a key problem.
        log.info("%s (%d so far)", text, total)
    else:
        log.warning("%s (%d so far)", text, total)


class HandshakeWatch:
    """Watches one socket's handshakes from a daemon thread until the socket closes."""

    def __init__(
        self, sock: zmq.Socket[Any], side: str, *, key: str = "", allowed_dir: str = ""
    ) -> None:
        self.side = side
        self._extra = key if side == "client" else allowed_dir
        self._no_detail = 0
        addr = f"inproc://ppomq-handshakes-{os.getpid()}-{next(_watch_ids)}"
        # MONITOR_STOPPED (sent at the socket's close only when asked for) ends the thread.
        events = _FAILED_EVENTS | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_MONITOR_STOPPED
        sock.monitor(addr, events)
        mon = sock.context.socket(zmq.PAIR)
        mon.setsockopt(zmq.LINGER, 0)
        mon.connect(addr)
        # The thread owns `mon` from here on (starting a thread is the memory barrier
        # ZeroMQ asks of a socket that changes threads).
        threading.Thread(
            target=self._run, args=(mon,), name="curve-handshakes", daemon=True
        ).start()

    def _run(self, mon: zmq.Socket[Any]) -> None:
        try:
            while True:
                frames = mon.recv_multipart()
                if len(frames) != 2 or len(frames[0]) != 6:
                    continue
                event, value = struct.unpack("=hi", frames[0])
                event &= 0xFFFF
                if event == zmq.EVENT_MONITOR_STOPPED:
                    return  # the socket closed
                self._on_event(event, value, frames[1].decode(errors="replace"))
        except zmq.ZMQError:
            return  # the context is terminating
        finally:
            mon.close(linger=0)

    def _on_event(self, event: int, value: int, endpoint: str) -> None:
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._no_detail = 0
            return
        if not event & _FAILED_EVENTS:
            return
        if self.side == "client" and event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self._no_detail += 1
            if self._no_detail < _NO_DETAIL_REPEATS:
                return
        reason = _reason(self.side, event, value & 0xFFFFFFFF)
        text = _describe(self.side, reason, endpoint, value & 0xFFFFFFFF, self._extra)
        _record(self.side, reason, text, endpoint)


__all__ = [
    "CurveClient",
    "CurveServer",
    "HandshakeWatch",
    "ServerAuth",
    "actor_id_matches_key",
    "client_from_settings",
    "handshake_failures",
    "is_loopback_bind",
    "key_suffix",
    "last_client_failure",
    "make_client",
    "self_client",
    "sender_key",
    "server_from_settings",
]
