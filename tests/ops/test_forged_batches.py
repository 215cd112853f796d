"""Forged batches at a running learner process: a stale batch is refused, and
nothing it says counts — not its env steps, not its episodes, not its `seq`.

One real learner (its own process, real ZeroMQ socket, real Redis); this test is both the
honest actor (valid CartPole batches at the current version, seq 0, 1, 2 ...) and the
forger (stale batches with huge returns, one under the honest actor's id with seq 2^64-1).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import msgpack
import numpy as np
import pytest

from benchmarks.messages.factory import make_batch, whole_episodes
from ppomq.core.envs import rollout_spec_for
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import EpisodeStats, encode
from tests.support import free_port, wait_until

from .services import LEARNER_SMALL, PPOMQ, STOPPED_BY_SIGTERM, Service, while_up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

T, N = 32, 4  # tests/ops/services.py ROLLOUT: what the learner expects
TOTAL_STEPS = 1_000_000  # far away: the lr anneals, and the run must not end by it
HONEST_RETURN = 10.0
FORGED = 40


def _with_seq(frames: list, seq: int) -> list:
    """The frames with another `seq` in the header (encode's packer stops at 2^63 - 1)."""
    header = msgpack.unpackb(frames[0], raw=False)
    header["seq"] = seq
    return [msgpack.packb(header, use_bin_type=True), *frames[1:]]


def _learner(
    tmp_path: Path, redis_url: str, run_id: str, run_dir: Path, addr: str, *extra: str
) -> Service:
    """A learner process on `addr` that a forged solve would end (--target-return 1000)."""
    return Service(
        "learner",
        [*PPOMQ, "learner", "--redis-url", redis_url, "--run-id", run_id,
         "--num-envs", str(N), "--num-steps", str(T), *LEARNER_SMALL,
         "--run-dir", str(run_dir), "--rollout-bind", addr, "--actors", "1",
         "--actor-timeout-s", "1", "--target-return", "1000",
         "--total-steps", str(TOTAL_STEPS), *extra],
        tmp_path / "learner.log",
    )  # fmt: skip


def test_forged_stale_batches_neither_count_nor_lock_out_the_honest_actor(
    redis_url, tmp_path: Path
):
    import redis as redis_lib

    run_id = "forged"
    run_dir = tmp_path / "run"
    addr = f"tcp://127.0.0.1:{free_port()}"
    learner = _learner(tmp_path, redis_url, run_id, run_dir, addr, "--max-staleness", "1",
                       "--learning-rate", "0.001")  # fmt: skip
    r = redis_lib.Redis.from_url(redis_url)
    from ppomq.core.store.keys import RunKeys

    keys = RunKeys(run_id)
    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=1 << 24,
                            num_envs=N)  # fmt: skip
    rng = np.random.default_rng(0)

    def version() -> int:
        raw = r.get(keys.stats)
        return int(json.loads(raw)["version"]) if raw else 0

    def rejected(reason: str) -> int:
        raw = r.get(keys.stats)
        return int(json.loads(raw).get("rejects", {}).get(reason, 0)) if raw else 0

    def batch(actor_id: str, seq: int, policy_version: int, episode_return: float):
        # Each env's episode fills the batch; its return is what the rewards sum to.
        b = whole_episodes(make_batch(spec, rng, seq=seq, actor_id=actor_id, n=N), episode_return)
        b.policy_version = policy_version
        return b

    learner.start()
    sender = RolloutSender(addr)
    honest_seq = 0
    try:

        def honest_update() -> None:
            nonlocal honest_seq
            v = version()
            assert sender.send(
                encode(batch("honest", honest_seq, v, HONEST_RETURN)), timeout_ms=30_000
            )
            honest_seq += 1
            what = f"version {v + 1} from honest seq {honest_seq - 1}"
            wait_until(lambda: version() > v, 60, what, **while_up(learner))

        honest_update()  # waits for the learner's socket (the send queues until it binds)
        honest_update()
        honest_update()  # learner at version 3: a batch of version 0 is stale (max 1)
        # The spoof: a stale batch under the honest actor's id with the largest seq there is.
        assert sender.send(_with_seq(encode(batch("honest", 0, 0, 1e6)), 2**64 - 1),
                           timeout_ms=5000)  # fmt: skip
        for i in range(FORGED):  # and stale fakes with huge returns, under other ids
            assert sender.send(encode(batch(f"forger-{i}", i, 0, 1e6)), timeout_ms=5000)
        # Every forgery refused before the honest actor goes on: the updates after this
        # are the proof that none of them counted (a forged "solve" would end the run, and
        # summary.json's solved_at_env_steps would say so).
        wait_until(lambda: rejected("stale") == FORGED + 1, 60, "every forged batch refused",
                   **while_up(learner))  # fmt: skip
        honest_update()  # still accepted after the spoof: seq 3 after 2, not after 2^64-1
        honest_update()
        honest_update()
        stats = json.loads(r.get(keys.stats))
    finally:
        sender.close()
        code = learner.stop()
    assert code == STOPPED_BY_SIGTERM, learner.log()

    # 6 accepted batches of N episodes of HONEST_RETURN each; the spoof's `seq` broke the
    # honest actor's episode continuity once: the batch after it has N unverified episodes
    # (not counted), the others' were followed from seq 0.
    honest = honest_seq
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["batches_accepted"] == honest
    assert summary["batches_rejected"] == {"stale": FORGED + 1}
    assert summary["total_env_steps"] == honest * T * N
    assert summary["discarded_env_steps"] == (FORGED + 1) * T * N
    assert summary["batches_produced"] == honest + FORGED + 1  # batches received
    assert summary["episodes"] == (honest - 1) * N and summary["episodes_unverified"] == N
    assert summary["final_mean_return_20"] == HONEST_RETURN
    assert summary["solved_at_env_steps"] is None
    assert summary["actors_seen"]["honest"]["env_steps"] == honest * T * N
    assert stats["env_steps"] == honest * T * N
    assert stats["discarded_env_steps"] == (FORGED + 1) * T * N
    with open(run_dir / "episodes.csv", newline="") as f:
        returns = [float(row["return"]) for row in csv.DictReader(f)]
        assert returns == [HONEST_RETURN] * (honest - 1) * N
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # Row k trained on the first k accepted batches: its env steps and annealed lr are
    # what those batches alone give.
    assert [int(row["env_steps"]) for row in rows] == [k * T * N for k in range(1, honest + 1)]
    for k, row in enumerate(rows, start=1):
        want = 0.001 * (1.0 - k * T * N / TOTAL_STEPS)
        assert float(row["charts/learning_rate"]) == pytest.approx(want, rel=1e-9)


def test_a_batch_claiming_returns_its_rewards_do_not_make_is_refused_not_solved(
    redis_url, tmp_path: Path
):
    """A fresh id's batch at the current version, claiming episodes of 1e6: once it ended
    a --target-return run as solved. The figures come from the rewards the learner trains
    on; claims that disagree are refused (`episodes_mismatch`) and counted."""
    import redis as redis_lib

    from ppomq.core.store.keys import RunKeys

    run_id, addr = "claims", f"tcp://127.0.0.1:{free_port()}"
    run_dir = tmp_path / "run"
    learner = _learner(tmp_path, redis_url, run_id, run_dir, addr)
    r = redis_lib.Redis.from_url(redis_url)
    keys = RunKeys(run_id)
    spec = rollout_spec_for("CartPole-v1", run_id=run_id, num_steps=T, max_bytes=1 << 24,
                            num_envs=N)  # fmt: skip
    rng = np.random.default_rng(0)

    def status() -> dict:
        raw = r.get(keys.stats)
        return json.loads(raw) if raw else {"version": 0, "rejects": {}}

    def batch(actor_id: str, seq: int) -> list:
        b = whole_episodes(make_batch(spec, rng, seq=seq, actor_id=actor_id, n=N), HONEST_RETURN)
        b.policy_version = status()["version"]
        return b

    learner.start()
    sender = RolloutSender(addr)

    def honest_update(seq: int) -> None:
        v = status()["version"]
        assert sender.send(encode(batch("honest", seq)), timeout_ms=30_000)
        wait_until(lambda: status()["version"] > v, 60, f"version {v + 1}", **while_up(learner))

    try:
        for seq in range(3):
            honest_update(seq)
        for i in range(5):  # current version, valid arrays, claims its rewards do not make
            forged = batch(f"claimer-{i}", 0)
            forged.episodes = EpisodeStats([1e6] * N, [T] * N)
            assert sender.send(encode(forged), timeout_ms=5000)
        wait_until(lambda: status()["rejects"].get("episodes_mismatch") == 5, 60, "5 refusals",
                   **while_up(learner))  # fmt: skip
        # An update after the refusals: the learner went on collecting, so the claims did
        # not end the run as solved.
        honest_update(3)
    finally:
        sender.close()
        code = learner.stop()
    assert code == STOPPED_BY_SIGTERM, learner.log()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["solved_at_env_steps"] is None
    assert summary["final_mean_return_20"] == HONEST_RETURN
    assert summary["episodes"] == 4 * N
    assert summary["batches_rejected"] == {"episodes_mismatch": 5}
    assert summary["ledger"]["actors"]["claimer-0"]["invalid"] == {"episodes_mismatch": 1}
