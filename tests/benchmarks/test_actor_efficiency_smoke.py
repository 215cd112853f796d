"""Smoke: the actor-efficiency benchmark runs end to end on a tiny budget and writes
well-formed results. Figures are never asserted: timing belongs to the benchmark."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import actor_efficiency as ae

pytestmark = pytest.mark.slow


def test_quick_run_writes_json_and_markdown(tmp_path):
    out = tmp_path / "results"
    code = ae.main(["--quick", "--configs", "no-flow-control", "--no-profile",
                    "--out", str(out), "--workdir", str(tmp_path / "runs")])  # fmt: skip
    assert code == 0
    doc = json.loads((out / "actor_efficiency.json").read_text())
    assert set(doc) == {"run", "meta", "summary", "system_runs", "alone_runs"}
    s = doc["summary"]["no-flow-control"]
    for key in ("system_sps", "alone_sps", "end_to_end_ratio"):
        assert isinstance(s[key], float) and math.isfinite(s[key]) and s[key] > 0, key
    run = doc["system_runs"][0]
    assert run["env_steps_in_window"] > 0
    assert "actor-0" in run["cpu_cores"] and "learner" in run["cpu_cores"]
    assert run["learner"]["versions"] > 0  # the learner wrote its summary on the warm stop
    md = (out / "actor_efficiency.md").read_text()
    assert md.startswith("# Actor efficiency") and "| no-flow-control |" in md


def test_profile_parser_sorts_main_thread_samples_by_what_the_actor_was_doing():
    # py-spy `record --format raw --threads` lines, as it writes them for an actor.
    raw = "\n".join(
        [
            "thread (1): MainThread;<module> (ppomq/cli.py:9);run_actor (ppomq/actor/service.py:"
            "120);EnvRunner.sample (ppomq/actor/runner.py:60);SyncVectorEnv.step "
            "(gymnasium/vector/sync_vector_env.py:230);CartPoleEnv.step (cartpole.py:180) 30",
            "thread (1): MainThread;run_actor (ppomq/actor/service.py:120);EnvRunner.sample "
            "(ppomq/actor/runner.py:58);MLPInference.act (ppomq/models/mlp.py:150) 20",
            "thread (1): MainThread;run_actor (ppomq/actor/service.py:110);refresh_weights "
            "(ppomq/actor/policy_sync.py:160);WeightsPrefetcher.newest (ppomq/actor/weights.py:94);"
            "Condition.wait_for (threading.py:360) 40",
            "thread (3): weights-prefetch;WeightsPrefetcher._run (ppomq/actor/weights.py:70);"
            "PolicyHolder.load (ppomq/actor/weights.py:36) 5",
            "thread (1): MainThread;run_actor (ppomq/actor/service.py:123);encode "
            "(proto/rollout_encode.py:210) 2",
            "thread (2): Thread-1 (serve_forever);serve_forever (socketserver.py:235) 99",
        ]
    )
    counts = ae.parse_raw_profile(raw)
    assert counts == {
        "sample: env step": 30,
        "sample: policy": 20,
        "weights: wait/fetch": 40,  # the background thread's load is not the step loop's
        "encode": 2,
    }
