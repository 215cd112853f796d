"""A local process that forges a batch under the honest actor's id, at the current policy
version, with the largest `seq` there is (2^64 - 1), against a real `ppomq train` run.

On a plain ZeroMQ data plane the learner would take it: every later batch of the honest
actor is then `seq_not_increasing`, the version freezes, and a run bounded only by
--total-steps never ends. `ppomq train` runs CURVE by default (keys made in RUN_DIR/keys),
so a process without an allowed key cannot reach the learner at all: the run goes on to
its --total-steps end as if nothing had happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest
import redis

from benchmarks.messages.factory import make_batch
from ppomq.core.envs import rollout_spec_for
from ppomq.core.store.keys import RunKeys
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.launch.wiring import connect_addr
from ppomq.proto import EpisodeStats, encode
from tests.support import wait_until

from .cli import PPOMQ, SMALL, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

T, N = 32, 4  # SMALL's --num-steps, --num-envs
# 400 versions of 2 batches (~10 s here): the forgery lands mid-run, still short on 2 cores.
TOTAL_STEPS = 400 * 256
FORGE_S = 1.5
MAX_SEQ = 2**64 - 1


def _running(proc: subprocess.Popen) -> Callable[[], None]:
    def check() -> None:
        assert proc.poll() is None, f"ppomq train exited ({proc.returncode})"

    return check


def _with_seq(frames: list, seq: int) -> list:
    """The frames with another `seq` in the header (encode's packer stops at 2^63 - 1)."""
    header = msgpack.unpackb(frames[0], raw=False)
    header["seq"] = seq
    return [msgpack.packb(header, use_bin_type=True), *frames[1:]]


def _actor_id(log: Path) -> str | None:
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.search(r"actor (a0-\S+): \d+ x ", text)
    return found.group(1) if found else None


def test_a_forged_max_seq_batch_under_the_actors_id_does_not_stop_the_run(tmp_path: Path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [*PPOMQ, "train", "--run-dir", str(run_dir), "--run-id", "forge", "--actors", "1",
         "--total-steps", str(TOTAL_STEPS), "--target-return", "100000", "--max-staleness", "4",
         *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
        start_new_session=True,
    )  # fmt: skip
    r = None
    try:
        settings = run_dir / "settings.json"
        wait_until(lambda: settings.exists() and settings.read_text().endswith("\n"), 90,
                   "settings.json, whole", check=_running(proc))  # fmt: skip
        cfg = json.loads(settings.read_text())
        r = redis.Redis.from_url(cfg["redis_url"], socket_timeout=2)
        latest_key = RunKeys(cfg["run_id"]).latest

        def latest() -> int:
            raw = r.get(latest_key)
            return -1 if raw is None else int(raw)

        actor_log = run_dir / "logs" / "actor-0.log"
        honest = wait_until(lambda: _actor_id(actor_log), 90, "the actor's id",
                            check=_running(proc))  # fmt: skip
        wait_until(lambda: latest() >= 2, 90, "version 2", check=_running(proc))
        spec = rollout_spec_for("CartPole-v1", run_id=cfg["run_id"], num_steps=T,
                                max_bytes=1 << 24, num_envs=N)  # fmt: skip
        rng = np.random.default_rng(0)
        # Any local process can reach the port. The learner moves on dozens of versions a
        # second, so the forger sends, round after round, at the versions it could take
        # (--max-staleness 4) and some ahead: one is current when it arrives.
        b = make_batch(spec, rng, seq=0, actor_id=honest, n=N)
        # A batch the learner cannot tell from an honest one: no episode ends, none claimed.
        b.arrays["terminated"][:] = False
        b.arrays["truncated"][:] = False
        b.episodes = EpisodeStats([], [])
        # Its close waits up to linger_ms for the batches still queued to leave.
        with RolloutSender(connect_addr(cfg["rollout_bind"]), linger_ms=2000) as forger:
            until = time.monotonic() + FORGE_S  # how long the attack lasts
            while time.monotonic() < until:
                v = latest()
                for version in range(max(0, v - 2), v + 10):
                    b.policy_version = version
                    forger.send(_with_seq(encode(b), MAX_SEQ), timeout_ms=20)
        # Mid-run: otherwise the run's end below says nothing about the forgery.
        assert proc.poll() is None, "the run ended before the forgery; raise TOTAL_STEPS"
        # A liveness bound, not a timing assertion: a locked-out actor never gets there.
        code = proc.wait(timeout=120)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if r is not None:
            r.close()
    assert code == 0, out + err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= TOTAL_STEPS, summary
    assert "seq_not_increasing" not in summary["batches_rejected"], summary
    assert list(summary["actors_seen"]) == [honest], summary["actors_seen"]
