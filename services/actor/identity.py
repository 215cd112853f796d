"""Who an actor is: its index (env seeds) and its id (the learner's ledger and roster)."""

from __future__ import annotations

import os
import secrets
import socket
import zlib

from ppomq.core.settings import ActorSettings
from ppomq.core.transport.curvezmq import CurveClient, key_suffix


def new_actor_id(actor_index: int, curve: CurveClient | None = None) -> str:
    """Unique per process incarnation: a restarted actor starts a fresh `seq` sequence.
    Under CURVE it ends with its key's suffix, which the learner checks
    (ppomq.core.transport.curvezmq)."""
    suffix = key_suffix(curve.public) if curve is not None else ""
    return f"a{actor_index}-{os.getpid()}-{secrets.token_hex(3)}{suffix}"


def actor_index_of(settings: ActorSettings) -> int:
    """The configured index, else one derived from the hostname: compose and k8s replicas
    have distinct hostnames but no index, and their env seeds must still differ."""
    if settings.actor_index is not None:
        return settings.actor_index
    return zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF
