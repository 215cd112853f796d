"""LearnerLoop without sockets: the staleness gate, publishing, status and checkpoints."""

from __future__ import annotations

import json
import queue
import threading
import time

import torch

from ppomq.actor.runner import EnvRunner
from ppomq.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.learner.loop import LearnerLoop, load_checkpoint
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from ppomq.policy import ActorCritic, InferencePolicy, model_spec_for
from ppomq.redis_util import connect_redis
from ppomq.rundir import RunRecorder
from ppomq.settings import LearnerSettings, load_settings
from ppomq.signals import WarmStop
from ppomq.weightserver.keys import RunKeys
from ppomq.weightserver.store import WeightStore


def _setup(tmp_path, redis_url, **overrides):
    s = load_settings(LearnerSettings, {
        "run_id": "loop", "run_dir": str(tmp_path), "num_envs": 2, "num_steps": 8,
        "actors": 2, "update_epochs": 1, "redis_url": redis_url, **overrides,
    })  # fmt: skip
    spec = rollout_spec_for("CartPole-v1", run_id="loop", num_steps=8, max_bytes=1 << 24)
    policy = ActorCritic(model_spec_for(spec, [8]))
    redis = connect_redis(redis_url)
    batches: queue.Queue = queue.Queue()
    loop = LearnerLoop(
        settings=s, trainer=PPOTrainer(policy=policy, config=PPOConfig.from_settings(s)),
        store=WeightStore(redis, "loop", keep_versions=s.keep_versions), redis=redis,
        batches=batches, recorder=RunRecorder(tmp_path, solve_threshold=475.0), version=5,
    )  # fmt: skip
    envs = make_vector_env("CartPole-v1", 2, [env_seed(0, 0, i) for i in range(2)])
    runner = EnvRunner(envs=envs, spec=spec, run_id="loop", actor_id="a", env_id="CartPole-v1")
    return loop, batches, runner, InferencePolicy(policy), redis


def test_one_step_trains_on_admitted_batches_and_publishes_the_next_version(tmp_path, redis_url):
    loop, batches, runner, inference, redis = _setup(tmp_path, redis_url, max_staleness=2)
    for seq, version in enumerate([2, 5, 4]):  # the first is 3 versions old: stale
        batches.put(runner.sample(inference, policy_version=version, seq=seq))
    assert loop.step(WarmStop())
    assert loop.version == 6
    assert loop.store.latest_version() == 6
    assert loop.gate.rejected == {"stale": 1} and loop.gate.accepted == 2
    assert loop.env_steps == 3 * 16  # every valid batch counts as work done, stale or not
    status = json.loads(redis.get(RunKeys("loop").stats))
    assert status["version"] == 6 and status["rejects"] == {"stale": 1}


def test_sync_mode_waits_for_one_current_batch_per_actor(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url, mode="sync")
    batches.put(runner.sample(inference, policy_version=4, seq=0))  # stale in sync mode
    batches.put(runner.sample(inference, policy_version=5, seq=1))
    batches.put(runner.sample(inference, policy_version=5, seq=2))
    assert loop.step(WarmStop())
    assert loop.gate.accepted == 2 and loop.gate.rejected == {"stale": 1}


def test_checkpoint_holds_what_a_restart_needs(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url)
    for seq in range(2):
        batches.put(runner.sample(inference, policy_version=5, seq=seq))
    loop.step(WarmStop())
    loop.checkpoint()
    ckpt = load_checkpoint(str(tmp_path))
    assert ckpt["version"] == 6 and ckpt["counters"]["env_steps"] == 32
    assert ckpt["run_id"] == "loop"
    restored = ActorCritic(loop.trainer.policy.spec)
    restored.load_state_dict(ckpt["trainer"]["policy"])
    for a, b in zip(restored.parameters(), loop.trainer.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_publish_waits_out_a_redis_outage_instead_of_crashing(tmp_path, start_redis):
    server = start_redis()
    url = f"redis://127.0.0.1:{server.port}/0"
    loop, *_ = _setup(tmp_path, url)
    loop.publish()
    server.stop()
    loop.version += 1
    done = threading.Event()
    worker = threading.Thread(target=lambda: (loop.publish(WarmStop()), done.set()))
    worker.start()
    time.sleep(1.5)
    assert not done.is_set()  # still retrying, not crashed
    server.start()  # same port, same (empty) data: Redis came back
    worker.join(timeout=30)
    assert done.is_set()
    assert loop.store.latest_version() == loop.version


def test_publish_gives_up_in_one_line_when_asked_to_stop_during_an_outage(
    tmp_path, start_redis, caplog
):
    server = start_redis()
    loop, *_ = _setup(tmp_path, f"redis://127.0.0.1:{server.port}/0")
    server.stop()
    stop = WarmStop()
    stop.requested = True
    loop.publish(stop)  # returns, no exception
    assert "not published, Redis unreachable" in caplog.text
