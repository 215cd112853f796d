"""10,000 hostile messages at a training learner's door, CURVE off and on.

Real `ppomq weightserver`, `ppomq learner` and two `ppomq actor` processes train CartPole on
loopback; once they do, this test (one more peer on the rollout socket; under CURVE one
holding a valid, allowed key) sends 10,000 hostile messages while they go on training:

- malformed messages from benchmarks/messages/badmsgs.py, each with the reason the learner's own
  decoder gives it (checked here against that catalogue's expected reason);
- valid-looking batches of policy version 0 under the sender's own id: stale;
- spoofs: batches under an honest actor's id with seq 2^64-1 (tests/ops/test_forged_batches.py):
  stale without CURVE, `actor_id_not_key` with it.

The learner runs with --max-staleness 20, so an honest batch (at most a few versions old
here) is never stale: every reject the learner counts during the run is one of ours, and
the counts by reason must equal what was sent exactly (sends block on the high-water mark;
nothing is dropped unsent). Then: versions keep coming during and after the flood, the
honest actors' batches are still accepted after the spoofs (no seq lock-out), and the
learner's RSS grows by less than a generous fixed bound. No timing assertion.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from benchmarks.messages.badmsgs import Generator, RngSource
from benchmarks.messages.factory import make_batch, whole_episodes
from ppomq.core.envs import rollout_spec_for
from ppomq.core.store.keys import RunKeys
from ppomq.core.transport.curvezmq import CurveClient, client_from_settings, key_suffix
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import DecodeError, Reason, SeqTracker, decode, encode
from tests.support import free_port, wait_until

from .services import (
    LEARNER_SMALL,
    PPOMQ,
    ROLLOUT,
    STOPPED_BY_SIGTERM,
    Service,
    while_up,
)
from .test_forged_batches import _with_seq

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

T, N = 32, 4  # ROLLOUT
FLOOD = 10_000
SPOOFS = 500  # under an honest actor's id, seq 2^64-1
STALE = 3_000  # version 0 under the sender's own id
MALFORMED = FLOOD - SPOOFS - STALE
STALENESS = 20  # honest batches are never this old: every stale one is ours
# Above badmsgs' 1 MiB header padding (one frame over ZeroMQ's MAXMSGSIZE would drop the
# connection uncounted), small enough that oversize messages stay cheap to send.
MAX_MESSAGE = 2 << 20
RSS_GROWTH_LIMIT = 200 << 20  # generous: a leak of 20 KiB per message would pass it


def _keys(root: Path, actors: int) -> Path:
    out = root / "keys"
    done = subprocess.run(
        [*PPOMQ, "keys", "generate", "--out", str(out), "--actors", str(actors)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _public_z85(path: Path) -> str:
    return path.read_text().split('public-key = "')[1].split('"')[0]


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise AssertionError(f"no VmRSS for pid {pid}")


def _malformed(spec: Any, count: int) -> tuple[list[list[bytes]], Counter[str]]:
    """`count` messages from the bad-message catalogue that the learner's decoder refuses,
    each for the reason the catalogue expects; and their counts by reason."""
    gen = Generator(spec, np.random.default_rng(17))
    src = RngSource(np.random.default_rng(1717))
    out: list[list[bytes]] = []
    want: Counter[str] = Counter()
    while len(out) < count:
        frames, reason, _name = gen.make(src)
        if reason is None or reason is Reason.SEQ_NOT_INCREASING:
            continue  # valid (or valid but for a seq the learner has no past for): not junk
        try:
            decode(frames, spec, SeqTracker())
        except DecodeError as exc:
            got = exc.reason
        else:
            continue  # e.g. env_id "CartPole-v1": valid for this learner
        if got is not reason:
            continue  # a catalogue case written for another spec
        if max(len(f) for f in frames) > spec.max_bytes:
            # A frame over the socket's MAXMSGSIZE (--max-message-bytes) makes
            # ZeroMQ drop the connection, with whatever else that peer had in flight,
            # before the learner sees any of it: nothing the learner could count.
            continue
        out.append(frames)
        want[got.label] += 1
    return out, want


@pytest.mark.parametrize("curve", [False, True], ids=["curve-off", "curve-on"])
def test_ten_thousand_hostile_messages_are_counted_and_training_goes_on(
    curve: bool, redis_url: str, tmp_path: Path
):
    import redis as redis_lib

    run_id = "flood"
    rollout = f"tcp://127.0.0.1:{free_port()}"
    weights = f"tcp://127.0.0.1:{free_port()}"
    common = ["--redis-url", redis_url, "--run-id", run_id]
    logs = tmp_path / "logs"
    logs.mkdir()
    keys = _keys(tmp_path, 3) if curve else None  # actors 0, 1 honest; 2 the flooder's
    server_flags: list[str] = []
    if keys is not None:
        server_flags = ["--curve-server-cert", str(keys / "server.key_secret"),
                        "--curve-allowed-dir", str(keys / "allowed")]  # fmt: skip
    weightserver = Service(
        "weightserver",
        [*PPOMQ, "weightserver", *common, "--bind", weights, "--poll-interval-s", "0.2",
         *server_flags],
        logs / "weightserver.log",
    )  # fmt: skip
    learner = Service(
        "learner",
        [*PPOMQ, "learner", *common, *ROLLOUT, *LEARNER_SMALL,
         "--run-dir", str(tmp_path / "run"), "--rollout-bind", rollout, "--total-steps", "0",
         "--actors", "2", "--target-return", "100000", "--max-staleness", str(STALENESS),
         "--keep-versions", str(STALENESS + 2), "--max-message-bytes", str(MAX_MESSAGE),
         *server_flags],
        logs / "learner.log",
    )  # fmt: skip

    def actor(index: int) -> Service:
        key_flags: list[str] = []
        if keys is not None:
            key_flags = ["--curve-actor-cert", str(keys / "actors" / f"actor-{index}.key_secret"),
                         "--curve-server-public-cert", str(keys / "server.key")]  # fmt: skip
        return Service(
            f"actor-{index}",
            [*PPOMQ, "actor", "--run-id", run_id, *ROLLOUT, "--actor-index", str(index),
             "--learner-addr", rollout, "--weightserver-addr", weights, *key_flags],
            logs / f"actor-{index}.log",
        )  # fmt: skip

    actors = [actor(0), actor(1)]
    services = [weightserver, learner, *actors]
    r = redis_lib.Redis.from_url(redis_url, socket_timeout=5)
    run_keys = RunKeys(run_id)

    def stats() -> dict[str, Any]:
        raw = r.get(run_keys.stats)
        return json.loads(raw) if raw else {}

    def version() -> int:
        return int(stats().get("version", 0))

    def rows() -> dict[str, dict[str, Any]]:
        """Each actor's ledger row, from the learner's actors hash in Redis."""
        return {
            k.decode(): json.loads(v).get("ledger", {})
            for k, v in r.hgetall(run_keys.actors).items()
        }

    def rejects() -> Counter[str]:
        return Counter(stats().get("rejects", {}))

    watch = while_up(*services, about=lambda: f"stats {stats()}")

    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=MAX_MESSAGE)
    malformed, want = _malformed(spec, MALFORMED)  # before the start: no core taken from it
    rng = np.random.default_rng(0)
    curve_client: CurveClient | None = None
    own_id = "flooder"
    if keys is not None:
        curve_client = client_from_settings(
            type("S", (), {"curve_actor_cert": str(keys / "actors" / "actor-2.key_secret"),
                           "curve_server_public_cert": str(keys / "server.key")})()
        )  # fmt: skip
        assert isinstance(curve_client, CurveClient)
        own_id = "flooder" + key_suffix(_public_z85(keys / "actors" / "actor-2.key"))
    stale_base = dataclasses.replace(
        whole_episodes(make_batch(spec, rng, actor_id=own_id, n=N)), policy_version=0
    )
    stale = [encode(dataclasses.replace(stale_base, seq=i, sent=i + 1)) for i in range(STALE)]
    want["stale"] += STALE
    want["actor_id_not_key" if curve else "stale"] += SPOOFS

    try:
        for s in services:
            s.start()
        # Version 0 is stale from version STALENESS + 1 on; both honest actors trained.
        wait_until(lambda: version() >= STALENESS + 3, 150, f"version {STALENESS + 3}", **watch)
        wait_until(lambda: len([a for a in rows().values() if a.get("accepted", 0) >= 1]) == 2,
                   150, "both honest actors accepted", **watch)  # fmt: skip
        honest = sorted(rows())
        assert len(honest) == 2, honest
        victim = honest[0]
        spoof = dataclasses.replace(
            whole_episodes(make_batch(spec, rng, actor_id=victim, n=N)), policy_version=0
        )
        spoof_frames = _with_seq(encode(spoof), 2**64 - 1)  # stale
        # Every message, shuffled: the kinds interleave as a hostile peer might send them.
        messages = [*malformed, *stale, *([spoof_frames] * SPOOFS)]
        order = np.random.default_rng(1).permutation(len(messages))
        assert len(messages) == FLOOD

        before = rejects()
        rss_before = _rss(learner.pid)
        v_before = version()
        accepted_before = {k: rows()[k].get("accepted", 0) for k in honest}
        with RolloutSender(rollout, curve=curve_client) as flooder:
            for i in order:
                assert flooder.send(messages[i], timeout_ms=30_000), "the learner stopped reading"
            v_flood_end = version()
            # The flooder's own id and the victim's stay out of the actors updates wait for.
            live_after_flood = stats()["live_actors"]
            # Open until all is counted: a PUSH socket closed with messages queued may drop
            # them (src/ppomq/core/transport/rollouts.py). Counts reach Redis every second, updates
            # or not.
            wait_until(lambda: (rejects() - before).total() >= FLOOD, 150,
                       "every hostile message counted", **watch)  # fmt: skip
        accepted_after_flood = {k: rows()[k].get("accepted", 0) for k in honest}
        wait_until(lambda: version() >= v_flood_end + 5, 150, "5 more versions after the flood",
                   **watch)  # fmt: skip
        wait_until(
            lambda: all(rows()[k].get("accepted", 0) > accepted_after_flood[k] for k in honest),
            150, "both honest actors accepted again after the spoofs", **watch,
        )  # fmt: skip
        counted = rejects() - before
        rss_after = _rss(learner.pid)
        final_rows = rows()
    finally:
        codes = {s.name: s.stop(timeout=30) for s in reversed(services)}
        r.close()
    assert codes["learner"] == STOPPED_BY_SIGTERM, learner.log()
    print(f"\nFLOOD curve={curve}: sent {FLOOD} {dict(sorted(want.items()))}; versions "
          f"{v_before} -> {v_flood_end} during the flood; learner RSS {rss_before >> 20} -> "
          f"{rss_after >> 20} MiB")  # fmt: skip
    # Training went on through the flood, and the honest actors were never locked out.
    assert v_flood_end > v_before
    assert live_after_flood == 2
    for k in honest:
        assert accepted_after_flood[k] >= accepted_before[k]
        assert final_rows[k]["duplicates"] == 0, final_rows[k]  # no seq lock-out
    # Every hostile message counted, by its reason, exactly; no honest batch refused.
    assert dict(counted) == dict(want)
    # The spoofs count against the id they claimed (the ledger attributes by header).
    victim_row = final_rows[victim]
    spoofed = victim_row["invalid"].get("actor_id_not_key", 0) if curve else victim_row["stale"]
    assert spoofed == SPOOFS, victim_row
    assert rss_after - rss_before < RSS_GROWTH_LIMIT
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert Counter(summary["batches_rejected"]) == before + want


VALID_FLOOD = 4_000  # well-formed batches under one id, each at the learner's current version
GRANT = 1  # --batches-per-version: what each actor may send with one version
LATEST_EVERY = 10  # the flooder reads the learner's current version every this many sends


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_flood_of_valid_batches_under_one_id_trains_at_most_its_grant(
    mode: str, redis_url: str, tmp_path: Path
):
    """One peer sends well-formed batches under one id of its own, each at the version the
    learner last published and with the next seq, as fast as the learner reads them (what
    anyone on the rollout socket could do; under CURVE, any holder of an allowed key). The
    learner trains on at most that id's grant per version and counts the rest as surplus,
    and the honest actors' accepted batches keep rising while it lasts."""
    import redis as redis_lib

    run_id = "valid-flood"
    staleness = 0 if mode == "sync" else STALENESS
    rollout = f"tcp://127.0.0.1:{free_port()}"
    weights = f"tcp://127.0.0.1:{free_port()}"
    common = ["--redis-url", redis_url, "--run-id", run_id]
    logs = tmp_path / "logs"
    logs.mkdir()
    weightserver = Service(
        "weightserver",
        [*PPOMQ, "weightserver", *common, "--bind", weights, "--poll-interval-s", "0.2"],
        logs / "weightserver.log",
    )
    learner = Service(
        "learner",
        [*PPOMQ, "learner", *common, *ROLLOUT, *LEARNER_SMALL,
         "--run-dir", str(tmp_path / "run"), "--rollout-bind", rollout, "--total-steps", "0",
         "--actors", "2", "--target-return", "100000", "--mode", mode, "--max-staleness",
         str(staleness), "--keep-versions", str(staleness + 2),
         "--batches-per-version", str(GRANT)],
        logs / "learner.log",
    )  # fmt: skip

    def actor(index: int) -> Service:
        return Service(
            f"actor-{index}",
            [*PPOMQ, "actor", "--run-id", run_id, *ROLLOUT, "--actor-index", str(index),
             "--learner-addr", rollout, "--weightserver-addr", weights],
            logs / f"actor-{index}.log",
        )  # fmt: skip

    actors = [actor(0), actor(1)]
    services = [weightserver, learner, *actors]
    r = redis_lib.Redis.from_url(redis_url, socket_timeout=5)
    run_keys = RunKeys(run_id)

    def latest() -> int:
        raw = r.get(run_keys.latest)
        return int(raw) if raw else 0

    def rows() -> dict[str, dict[str, Any]]:
        return {
            k.decode(): json.loads(v).get("ledger", {})
            for k, v in r.hgetall(run_keys.actors).items()
        }

    def accepted(actor_ids: list[str]) -> int:
        now = rows()
        return sum(now.get(k, {}).get("accepted", 0) for k in actor_ids)

    watch = while_up(*services, about=lambda: f"actors {rows()}")
    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=MAX_MESSAGE)
    own_id = "flooder"
    batch = whole_episodes(make_batch(spec, np.random.default_rng(5), actor_id=own_id, n=N))
    first, *rest = encode(batch)
    header = msgpack.unpackb(first, raw=False)

    try:
        for s in services:
            s.start()
        wait_until(lambda: latest() >= 3, 150, "version 3", **watch)
        wait_until(lambda: len([a for a in rows().values() if a.get("accepted", 0) >= 1]) == 2,
                   150, "both honest actors accepted", **watch)  # fmt: skip
        honest = sorted(rows())
        assert len(honest) == 2 and own_id not in honest, honest
        v_start = latest()
        honest_seen = [accepted(honest)]
        with RolloutSender(rollout) as flooder:
            for i in range(VALID_FLOOD):
                if i % LATEST_EVERY == 0:
                    header["policy_version"] = latest()
                header["seq"] = i + 1
                frames = [msgpack.packb(header, use_bin_type=True), *rest]
                assert flooder.send(frames, timeout_ms=30_000), "the learner stopped reading"
                if i + 1 == VALID_FLOOD // 2:
                    honest_seen.append(accepted(honest))
            v_end = latest()  # no batch was stamped with a newer version
            flooder_during = rows().get(own_id, {}).get("accepted", 0)
            # Open until all is counted: a PUSH socket closed with messages queued may drop
            # them (src/ppomq/core/transport/rollouts.py).
            wait_until(lambda: rows().get(own_id, {}).get("received", 0) >= VALID_FLOOD, 150,
                       "every flooding batch counted", **watch)  # fmt: skip
            honest_seen.append(accepted(honest))
        row = rows()[own_id]
    finally:
        codes = {s.name: s.stop(timeout=30) for s in reversed(services)}
        r.close()
    assert codes["learner"] == STOPPED_BY_SIGTERM, learner.log()
    versions = v_end - v_start + 1  # the versions the flooder's batches could carry
    print(f"\nVALID FLOOD: {VALID_FLOOD} batches over versions {v_start}..{v_end}; flooder "
          f"{row}; honest accepted {honest_seen}")  # fmt: skip
    # The honest actors trained all along: more of their batches in each half of the flood
    # (sends are buffered: its second half ends when the learner has counted every batch).
    assert all(b > a for a, b in itertools.pairwise(honest_seen)), honest_seen
    # The flooder trained at most its grant per version; the rest was surplus.
    assert flooder_during <= versions * GRANT, (flooder_during, versions)
    assert row["accepted"] <= versions * GRANT, (row, versions)
    # Sync, a batch stamped with a version the learner has since moved past is stale.
    assert row["accepted"] + row["surplus"] + row["stale"] == VALID_FLOOD, row
