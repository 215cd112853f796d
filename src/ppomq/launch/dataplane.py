"""The data plane of a `ppomq train` run: CURVE with keys the run makes for itself
(RUN_DIR/keys) by default, plain ZeroMQ on loopback with --no-curve; never plain ZeroMQ
beyond loopback unless asked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ppomq.commands.keys import generate
from ppomq.core.errors import UsageError
from ppomq.core.settings import TrainSettings
from ppomq.core.transport.curvezmq import is_loopback_bind

KEYS_DIR = "keys"


@dataclass(frozen=True)
class RunKeys:
    """A run's CURVE key files (`ppomq keys generate`'s layout under RUN_DIR/keys)."""

    root: Path

    @property
    def server_cert(self) -> str:
        return str(self.root / "server.key_secret")

    @property
    def server_public_cert(self) -> str:
        return str(self.root / "server.key")

    @property
    def allowed_dir(self) -> str:
        return str(self.root / "allowed")

    def actor_cert(self, index: int) -> str:
        return str(self.root / "actors" / f"actor-{index}.key_secret")

    def server_settings(self) -> dict[str, str]:
        """The learner's and the weightserver's CURVE settings."""
        return {"curve_server_cert": self.server_cert, "curve_allowed_dir": self.allowed_dir}

    def actor_settings(self, index: int) -> dict[str, str]:
        """Local actor `index`'s CURVE settings."""
        return {
            "curve_actor_cert": self.actor_cert(index),
            "curve_server_public_cert": self.server_public_cert,
        }


def describe_data_plane(s: TrainSettings) -> str:
    """What the first line says about the data plane; a UsageError (one line) for a plane
    that other hosts could reach without CURVE, or for key files given to `ppomq train`."""
    given = [n for n in ("curve_server_cert", "curve_allowed_dir") if getattr(s, n)]
    if given:
        raise UsageError(
            f"`ppomq train` makes its own CURVE keys (in RUN_DIR/{KEYS_DIR}): leave out {given[0]}"
        )
    if s.curve:
        return f"CURVE, keys in RUN_DIR/{KEYS_DIR}"
    beyond = [b for b in (s.rollout_bind, s.weightserver_bind) if b and not is_loopback_bind(b)]
    if not beyond:
        return (
            "plain ZeroMQ on loopback, unauthenticated (--no-curve): any local process may "
            "send rollouts and read weights"
        )
    if not s.insecure_plaintext:
        raise UsageError(
            f"{beyond[0]} reaches beyond loopback, and CURVE is off: drop --no-curve (keys "
            "made in the run dir), bind 127.0.0.1, or --insecure-plaintext to let anyone who "
            "reaches the port in"
        )
    return (
        "plain ZeroMQ beyond loopback (--insecure-plaintext): anyone who reaches the ports "
        "may connect"
    )


def run_keys(run_dir: Path, actors: int) -> RunKeys:
    """RUN_DIR/keys, made now if absent (a resumed run keeps its keys); a UsageError if it
    holds no key pair for one of the `actors` local actors."""
    keys = RunKeys(run_dir / KEYS_DIR)
    if not Path(keys.server_cert).exists():
        generate(keys.root, actors)
    for i in range(actors):
        if not Path(keys.actor_cert(i)).exists():
            raise UsageError(
                f"{keys.root} holds no key pair for actor {i} ({keys.actor_cert(i)}); "
                f"write the keys for at least {actors} actors with `ppomq keys generate "
                f"--out DIR --actors {actors}`, or leave --run-dir out for a new run"
            )
    return keys
