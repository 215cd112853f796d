"""The rollout ledger and bounded per-actor state, with real service processes.

A real learner (own process, real ZeroMQ, real Redis): honest actors through an actor
SIGKILL and a learner restart (the ledger adds up and names the loss); a learner stalled
by batches it cannot train on (its rejects show in `ppomq status` and on /metrics, with
no update); 10,000 forged actor ids (its per-actor state stays within --max-actors).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from benchmarks.messages.factory import make_batch, whole_episodes
from ppomq.core.envs import rollout_spec_for
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import encode
from tests.support import free_port, wait_until

from .services import (
    LEARNER_SMALL,
    PPOMQ,
    ROLLOUT,
    STOPPED_BY_SIGTERM,
    Service,
    System,
    while_up,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

T, N = 32, 4  # ROLLOUT


def _status(redis_url: str, run_id: str) -> dict:
    out = subprocess.run(
        [*PPOMQ, "status", "--redis-url", redis_url, "--run-id", run_id, "--json",
         "--forget-after-s", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _check_ledger(summary: dict) -> dict:
    """The ledger adds up, per actor and in total, and agrees with the summary's counts."""
    ledger = summary["ledger"]
    t = ledger["totals"]
    rejects = summary["batches_rejected"]
    assert t["received"] == summary["batches_produced"]
    assert t["accepted"] == summary["batches_accepted"]
    assert t["stale"] == rejects.get("stale", 0)
    assert t["duplicates"] == rejects.get("seq_not_increasing", 0)
    assert t["received"] == t["accepted"] + t["rejected"]
    assert t["sent"] == t["received"] + t["lost_in_flight"]
    assert "actor killed mid-send, partition, learner restart" in ledger["lost_in_flight_means"]
    for actor_id, row in ledger["actors"].items():
        assert row["sent"] is not None, actor_id  # the actors send `sent` (ROLLOUT 1.1)
        assert row["sent"] - row["received"] == row["lost_in_flight"] >= 0, (actor_id, row)
        rejected = row["stale"] + row["duplicates"] + sum(row["invalid"].values())
        assert row["received"] == row["accepted"] + rejected
    return t


def test_the_ledger_adds_up_through_an_actor_sigkill_and_a_learner_restart(
    redis_url: str, tmp_path: Path
):
    with System(tmp_path, redis_url, run_id="ledger") as system:
        system.start()
        ckpt = system.run_dir / "checkpoints" / "ckpt.pt"
        system.wait_for(lambda: (system.latest() or 0) >= 4, timeout_s=120, what="4 versions")
        system.wait_for(lambda: len(system.actor_entries()) == 2, timeout_s=60, what="actors")
        # Live: every status carries the ledger, and each actor's row adds up.
        for entry in system.actor_entries().values():
            row = entry["ledger"]
            assert row["sent"] >= row["received"] >= row["accepted"] >= 1
        killed = system.actors[1]
        killed.kill()  # SIGKILL mid-run: what it had queued is lost in flight
        v = system.latest() or 0
        system.wait_for(
            lambda: (system.latest() or 0) >= v + 3, timeout_s=60, what="3 more",
            allow_down=[killed],
        )  # fmt: skip
        system.wait_for(ckpt.exists, timeout_s=60, what="a checkpoint", allow_down=[killed])
        system.learner.kill()  # no warm stop: what it received since its checkpoint is lost
        v_killed = system.latest() or 0
        system.learner.start()
        system.wait_for(
            lambda: (system.latest() or 0) >= v_killed + 3, timeout_s=120,
            what="3 versions after the restart", allow_down=[killed],
        )  # fmt: skip
        live = _status(redis_url, "ledger")
        assert live["ledger"]["received"] == live["ledger"]["accepted"] + live["ledger"]["rejected"]
        system.actors[0].stop()
        assert system.learner.stop() == STOPPED_BY_SIGTERM, system.learner.log()
    summary = json.loads((system.run_dir / "summary.json").read_text())
    t = _check_ledger(summary)
    assert summary["learner_restarts"] == 1
    print(f"\nLEDGER actor SIGKILL + learner restart: {t}")
    assert len(summary["ledger"]["actors"]) == 2 and t["actors_trained"] == summary["actors"] == 2
    assert t["actors_forgotten"] == 0 and t["actors_dropped_over_cap"] == 0


def _learner(tmp_path: Path, redis_url: str, run_id: str, addr: str, *extra: str) -> Service:
    return Service(
        "learner",
        [*PPOMQ, "learner", "--redis-url", redis_url, "--run-id", run_id, *ROLLOUT,
         *LEARNER_SMALL, "--run-dir", str(tmp_path / "run"), "--rollout-bind", addr,
         "--actors", "1", "--total-steps", "0", *extra],
        tmp_path / "learner.log",
    )  # fmt: skip


def test_a_stalled_learner_shows_its_rejects_in_status_and_metrics(redis_url, tmp_path: Path):
    run_id, addr, port = "stalled", f"tcp://127.0.0.1:{free_port()}", free_port()
    learner = _learner(tmp_path, redis_url, run_id, addr, "--metrics-port", str(port))
    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=1 << 24,
                            num_envs=N)  # fmt: skip
    rng = np.random.default_rng(0)
    future = make_batch(spec, rng, actor_id="f", n=N)
    future.policy_version = 1000  # never admissible: the learner never trains
    learner.start()
    sender = RolloutSender(addr)
    try:
        for i in range(20):
            assert sender.send(encode(dataclasses.replace(future, seq=i, sent=i + 1)), 30_000)
        wrong = dataclasses.replace(future, run_id="another-run", sent=21)  # invalid, named
        assert sender.send(encode(wrong), 5000)

        def shown() -> dict:
            s = _status(redis_url, run_id)
            return s if s.get("rejects", {}).get("future_version") == 20 else {}

        status = wait_until(shown, 90, "the rejects in `ppomq status`", **while_up(learner))
        assert status["version"] == 0  # stalled: no update happened
        assert status["rejects"] == {"future_version": 20, "run_id": 1}
        led = status["ledger"]
        # The invalid one's `sent` (21) is not taken: a refused message moves no figure.
        assert (led["sent"], led["received"], led["invalid"]) == (
            20,
            21,
            {"future_version": 20, "run_id": 1},
        )
        [row] = status["actors"]
        assert (row["actor_id"], row["sent"], row["rejected"], row["lost_in_flight"]) == (
            "f",
            20,
            21,
            0,
        )
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        )
        assert 'ppomq_learner_batches_rejected_total{reason="future_version"} 20.0' in text
        assert "ppomq_learner_ledger_received_total 21.0" in text
        table = subprocess.run(
            [*PPOMQ, "status", "--redis-url", redis_url, "--run-id", run_id],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert "ledger: sent 20, received 21" in table and "lost in flight 0" in table
    finally:
        sender.close()
        learner.stop()


def test_10000_forged_actor_ids_stay_within_the_cap(redis_url, tmp_path: Path):
    import redis as redis_lib

    from ppomq.core.store.keys import RunKeys

    run_id, addr, cap, flood = "flood", f"tcp://127.0.0.1:{free_port()}", 100, 10_000
    learner = _learner(tmp_path, redis_url, run_id, addr, "--max-actors", str(cap))
    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=1 << 24,
                            num_envs=N)  # fmt: skip
    forged = make_batch(spec, np.random.default_rng(1), n=N)
    forged.policy_version = 10**9  # valid-looking, never admissible
    learner.start()
    sender = RolloutSender(addr)
    r = redis_lib.Redis.from_url(redis_url)
    try:
        for i in range(flood):
            b = dataclasses.replace(forged, actor_id=f"forged-{i:05d}", seq=i, sent=1)
            assert sender.send(encode(b), 30_000)
        status = wait_until(
            lambda: (
                (s := _status(redis_url, run_id)).get("ledger", {}).get("received") == flood and s
            ),
            150,
            "the flood counted",
            **while_up(learner),
        )
        assert r.hlen(RunKeys(run_id).actors) <= cap
        assert len(status["actors"]) + len(status["hidden_actors"]) <= cap
        led = status["ledger"]
        assert led["actors_tracked"] == cap
        assert led["actors_dropped_over_cap"] == flood - cap
        assert led["received"] == led["invalid"]["future_version"] == flood
    finally:
        sender.close()
        code = learner.stop()
        r.close()
    assert code == STOPPED_BY_SIGTERM, learner.log()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(summary["ledger"]["actors"]) <= cap and len(summary["actors_seen"]) <= cap
    assert summary["ledger"]["totals"]["actors_dropped_over_cap"] == flood - cap
    assert (tmp_path / "run" / "checkpoints" / "ckpt.pt").stat().st_size < 300_000


def test_claims_and_junk_cannot_poison_the_ledger(redis_url: str, tmp_path: Path):
    """A refused message naming the honest actor with `sent` = 2^62 once made "lost in
    flight" 4.6e18 and the waste ratio 1.92; junk naming no sender was missing from the
    totals. Now `sent` is bounded by what the learner saw, the waste ratio is valid batches
    not trained on over valid batches received, and every refusal is in the totals."""
    import msgpack

    from ppomq.core.store.keys import RunKeys

    run_id, addr, junk = "poison", f"tcp://127.0.0.1:{free_port()}", 300
    learner = _learner(tmp_path, redis_url, run_id, addr, "--actor-timeout-s", "1")
    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=1 << 24,
                            num_envs=N)  # fmt: skip
    rng = np.random.default_rng(0)
    import redis as redis_lib

    r = redis_lib.Redis.from_url(redis_url)

    def version() -> int:
        raw = r.get(RunKeys(run_id).stats)
        return int(json.loads(raw)["version"]) if raw else 0

    def honest(seq: int):
        b = whole_episodes(make_batch(spec, rng, seq=seq, actor_id="honest", n=N))
        b.policy_version, b.sent = version(), seq + 1
        return b

    learner.start()
    sender = RolloutSender(addr)
    try:
        for seq in range(3):
            v = version()
            assert sender.send(encode(honest(seq)), 30_000)
            wait_until(lambda v=v: version() > v, 90, f"version {v + 1}", **while_up(learner))
        # Invalid (another run), naming the honest actor, claiming 2^62 sent.
        wrong_run = dataclasses.replace(honest(3), run_id="other", sent=2**62)
        assert sender.send(encode(wrong_run), 5000)
        # Valid but stale, under the honest id, claiming 2^62: bounded by its seq.
        stale = dataclasses.replace(honest(3), policy_version=0, sent=2**62)
        assert sender.send(encode(stale), 5000)
        for i in range(junk):  # naming no one: not msgpack, or a map without actor_id
            frames = [b"\xc1" * 8, b""] if i % 2 else [msgpack.packb({"seq": i}), b""]
            assert sender.send(frames, 5000)
        v = version()
        assert sender.send(encode(honest(4)), 30_000)
        wait_until(lambda: version() > v, 90, "the honest actor's next version",
                   **while_up(learner))  # fmt: skip
        wait_until(lambda: sum(_status(redis_url, run_id).get("ledger", {}).get("unattributed", {})
                               .values()) == junk, 90, "the junk in the totals",
                   **while_up(learner))  # fmt: skip
    finally:
        sender.close()
        assert learner.stop() == STOPPED_BY_SIGTERM, learner.log()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    t = summary["ledger"]["totals"]
    row = summary["ledger"]["actors"]["honest"]
    assert row["sent"] == 5 == row["received"] - 1  # 4 valid + stale seq 3; the invalid one
    assert row["lost_in_flight"] == t["lost_in_flight"] == 0
    assert 0.0 <= summary["waste_ratio"] <= 1.0
    assert summary["waste_ratio"] == pytest.approx(1 / 5)  # the stale one of 5 valid batches
    refused = sum(summary["batches_rejected"].values())
    in_totals = (t["stale"] + t["duplicates"] + sum(t["invalid"].values())
                 + sum(t["unattributed"].values()))  # fmt: skip
    assert refused == in_totals == junk + 2
