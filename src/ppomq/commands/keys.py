"""`ppomq keys generate --out DIR [--actors N]`: CURVE key pairs for the data plane.

Writes, in ZeroMQ's certificate format (pyzmq's `zmq.auth.create_certificates`):

    DIR/server.key, DIR/server.key_secret          the learner's and weightservers' pair
    DIR/actors/actor-I.key, actor-I.key_secret     one pair per actor (I = 0 .. N-1)
    DIR/allowed/actor-I.key                        the allow-list: the actors' public certs

Secret files are mode 0600 (directories 0700). Existing keys are never overwritten.
The learner and the weightserver need them whenever they bind beyond loopback:
docs/guides/security.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from ppomq.core.errors import UsageError


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "keys",
        help="generate CURVE keys for the data plane (authentication + encryption)",
        description="Generate ZeroMQ CURVE certificates: one server pair (learner and "
        "weightservers), one pair per actor, and the allow-list of actor public keys.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    gen = verbs.add_parser(
        "generate",
        help="write a server key pair, N actor key pairs and the allow-list",
        description="Write DIR/server.key(_secret), DIR/actors/actor-I.key(_secret) and "
        "DIR/allowed/actor-I.key; secret files mode 0600. Refuses to overwrite keys.",
    )
    gen.add_argument("--out", required=True, metavar="DIR", help="directory to write into")
    gen.add_argument(
        "--actors", type=int, default=1, metavar="N", help="actor key pairs (default 1)"
    )
    gen.set_defaults(func=run_generate)


def _targets(out: Path, actors: int) -> list[Path]:
    paths = [out / "server.key", out / "server.key_secret"]
    for i in range(actors):
        paths += [
            out / "actors" / f"actor-{i}.key",
            out / "actors" / f"actor-{i}.key_secret",
            out / "allowed" / f"actor-{i}.key",
        ]
    return paths


def generate(out: Path, actors: int) -> list[Path]:
    """Write the keys (see the module doc); the paths written. UsageError if any exists."""
    import zmq.auth

    if actors < 0:
        raise UsageError(f"--actors must be >= 0 (got {actors})")
    targets = _targets(out, actors)
    for path in targets:
        if path.exists():
            raise UsageError(
                f"{path} exists: refusing to overwrite keys; choose another --out or remove "
                "the old keys first"
            )
    old_umask = os.umask(0o077)  # secrets are never readable by others, not even briefly
    try:
        for d in (out, out / "actors", out / "allowed"):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        zmq.auth.create_certificates(out, "server")
        for i in range(actors):
            public, _ = zmq.auth.create_certificates(out / "actors", f"actor-{i}")
            shutil.copyfile(public, out / "allowed" / f"actor-{i}.key")
    finally:
        os.umask(old_umask)
    for path in targets:
        os.chmod(path, 0o600 if path.name.endswith(".key_secret") else 0o644)
    return targets


def run_generate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    written = generate(out, args.actors)
    for path in written:
        print(f"wrote {path}")
    print("\nlearner and weightserver:")
    print(f"  PPOMQ_CURVE_SERVER_CERT={out / 'server.key_secret'}")
    print(f"  PPOMQ_CURVE_ALLOWED_DIR={out / 'allowed'}")
    for i in range(args.actors):
        print(f"actor {i}:")
        print(f"  PPOMQ_CURVE_ACTOR_CERT={out / 'actors' / f'actor-{i}.key_secret'}")
        print(f"  PPOMQ_CURVE_SERVER_PUBLIC_CERT={out / 'server.key'}")
    if args.actors >= 1:
        q = shlex.quote
        print(
            '\nKubernetes (docs/guides/kubernetes.md "CURVE keys"; '
            "actor replicas share actor-0's pair):"
        )
        create = "  kubectl -n ppomq create secret generic"
        print(f"{create} ppomq-curve-server --from-file={q(str(out / 'server.key_secret'))}")
        print(f"{create} ppomq-curve-allowed --from-file={q(str(out / 'allowed'))}/")
        actor0 = q(str(out / "actors" / "actor-0.key_secret"))
        print(f"{create} ppomq-curve-actor --from-file=actor.key_secret={actor0} "
              f"--from-file={q(str(out / 'server.key'))}")  # fmt: skip
    print(
        "\nKeep *.key_secret files private (only actor-I's goes to actor I); the allow-list "
        "is read at start: restart the learner and weightservers after changing it."
    )
    return 0
