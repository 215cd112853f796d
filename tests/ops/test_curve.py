"""CURVE on the data plane, end to end: real `ppomq weightserver`, `ppomq learner`
and `ppomq actor` processes on loopback, keys from `ppomq keys generate`.

- the actor with an allowed key trains: versions are published from its batches;
- actors with no key, or with a valid key that is not on the allow-list, get no weights
  (so never take an env step) and none of their batches reaches the learner;
- a batch from an allowed key under another actor's id is refused as `actor_id_not_key`,
  and the honest actor's batches are still accepted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks.messages.factory import make_batch
from ppomq.core.envs import rollout_spec_for
from ppomq.core.store.keys import RunKeys
from ppomq.core.transport.curvezmq import CurveClient, client_from_settings, key_suffix
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import encode
from tests.support import free_port, wait_until

from .services import LEARNER_SMALL, PPOMQ, ROLLOUT, STOPPED_BY_SIGTERM, Service, while_up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

T, N = 32, 4  # ROLLOUT
FORGED = 5


def _keys(root: Path, name: str, actors: int) -> Path:
    out = root / name
    done = subprocess.run(
        [*PPOMQ, "keys", "generate", "--out", str(out), "--actors", str(actors)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "PPOMQ_CURVE_SERVER_CERT=" in done.stdout
    return out


def test_curve_admits_only_allowed_keys_and_binds_actor_ids_to_them(redis_url, tmp_path):
    import redis as redis_lib

    keys = _keys(tmp_path, "keys", 2)
    other = _keys(tmp_path, "other", 1)
    run_id = "curve"
    run_dir = tmp_path / "run"
    rollout = f"tcp://127.0.0.1:{free_port()}"
    weights = f"tcp://127.0.0.1:{free_port()}"
    server_flags = ["--curve-server-cert", str(keys / "server.key_secret"),
                    "--curve-allowed-dir", str(keys / "allowed")]  # fmt: skip
    common = ["--redis-url", redis_url, "--run-id", run_id]
    logs = tmp_path / "logs"
    logs.mkdir()
    weightserver = Service(
        "weightserver",
        [*PPOMQ, "weightserver", *common, "--bind", weights, "--poll-interval-s", "0.2",
         *server_flags],
        logs / "weightserver.log",
    )  # fmt: skip
    learner = Service(
        "learner",
        [*PPOMQ, "learner", *common, *ROLLOUT, *LEARNER_SMALL, "--run-dir", str(run_dir),
         "--rollout-bind", rollout, "--total-steps", "0", "--actors", "1",
         "--actor-timeout-s", "1", "--target-return", "100000", *server_flags],
        logs / "learner.log",
    )  # fmt: skip

    def actor(name: str, index: int, key_flags: list[str]) -> Service:
        return Service(
            name,
            [*PPOMQ, "actor", "--run-id", run_id, *ROLLOUT, "--actor-index", str(index),
             "--learner-addr", rollout, "--weightserver-addr", weights, *key_flags],
            logs / f"{name}.log",
        )  # fmt: skip

    honest = actor("honest", 0, [
        "--curve-actor-cert", str(keys / "actors" / "actor-0.key_secret"),
        "--curve-server-public-cert", str(keys / "server.key")])  # fmt: skip
    strangers = [
        actor("no-key", 5, []),
        actor("not-allowed", 6, [
            "--curve-actor-cert", str(other / "actors" / "actor-0.key_secret"),
            "--curve-server-public-cert", str(keys / "server.key")]),
    ]  # fmt: skip
    services = [weightserver, learner, honest, *strangers]
    r = redis_lib.Redis.from_url(redis_url, socket_timeout=2)
    stats_key = RunKeys(run_id).stats

    def version() -> int:
        raw = r.get(stats_key)
        return int(json.loads(raw)["version"]) if raw else 0

    watch = while_up(*services)

    # The forger holds a valid, allowed key (actor 1's) and claims actor 0's identity.
    forger_key = client_from_settings(
        type("S", (), {"curve_actor_cert": str(keys / "actors" / "actor-1.key_secret"),
                       "curve_server_public_cert": str(keys / "server.key")})()
    )  # fmt: skip
    assert isinstance(forger_key, CurveClient)
    honest_public = (keys / "actors" / "actor-0.key").read_text()
    honest_z85 = honest_public.split('public-key = "')[1].split('"')[0]
    spoofed_id = "a0-1-abcdef" + key_suffix(honest_z85)
    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=1 << 24,
                            num_envs=N)  # fmt: skip
    rng = np.random.default_rng(0)
    try:
        for s in services:
            s.start()
        wait_until(lambda: version() >= 3, 90, "3 versions trained on the honest actor's batches",
                   **watch)  # fmt: skip
        with RolloutSender(rollout, curve=forger_key) as forger:
            for seq in range(FORGED):
                b = make_batch(spec, rng, seq=10_000 + seq, actor_id=spoofed_id, n=N)
                b.policy_version = version()
                assert forger.send(encode(b), timeout_ms=10_000)
        v = version()
        wait_until(lambda: version() >= v + 2, 90, "2 more versions after the forgery", **watch)
        for s in strangers:
            assert s.alive(), s.log()
            assert "first env step" not in s.log(), f"{s.name} got weights:\n{s.log()}"
    finally:
        codes = {s.name: s.stop(timeout=30) for s in reversed(services)}
        r.close()
    assert codes["learner"] == STOPPED_BY_SIGTERM, learner.log()
    assert "CURVE" in learner.log(tail=10**7) and "CURVE" in weightserver.log(tail=10**7)
    summary = json.loads((run_dir / "summary.json").read_text())
    rejected = dict(summary["batches_rejected"])
    assert rejected.pop("actor_id_not_key", 0) == FORGED, summary
    assert set(rejected) <= {"stale"}, summary  # the honest actor's, if any: never decoded
    seen = summary["actors_seen"]
    suffix = key_suffix(honest_z85)
    # Only the honest actor's batches were taken: none from the strangers, none forged.
    assert list(seen) and all(a.endswith(suffix) and a != spoofed_id for a in seen), seen
    assert summary["batches_accepted"] >= 5
    assert summary["total_env_steps"] == summary["batches_accepted"] * T * N
    led = summary["ledger"]["totals"]
    print(f"\nSECURITY curve: accepted {summary['batches_accepted']} (the honest key's), "
          f"rejected {summary['batches_rejected']}, ledger {led}")  # fmt: skip
