"""A restarted learner: its checkpoint carries every counter, and versions keep meaning."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ppomq.core.models import numpy_state
from ppomq.core.rundir import RunRecorder
from ppomq.core.signals import WarmStop
from ppomq.learner.checkpoint import load_checkpoint
from ppomq.learner.recovery import resume
from ppomq.proto.weights_blob import unpack_tensors

from .test_loop import _sample, _setup


def _trained_loop(tmp_path, redis_url, updates: int = 2):
    # Checkpoints only when the test says so.
    loop, batches, runner, inference, redis = _setup(
        tmp_path, redis_url, actors=1, checkpoint_interval_s=3600
    )
    for seq in range(updates):
        batches.put(_sample(runner, inference, "a", loop.run.version, seq))
        assert loop.step(WarmStop())
    return loop, batches, runner, inference, redis


def _fresh_loop(tmp_path, redis_url, **overrides):
    loop, *_ = _setup(tmp_path, redis_url, actors=1, **overrides)
    loop.run.version = 0
    return loop


def test_a_resumed_loop_has_every_counter_the_summary_reports(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _trained_loop(tmp_path, redis_url)
    batches.put(_sample(runner, inference, "a", 1, 99))  # 6 versions behind: stale
    batches.put(_sample(runner, inference, "a", loop.run.version, 100))
    assert loop.step(WarmStop())
    loop.admission.door_rejects = {"bad_shape": 2}
    loop.run.recorder.add_episodes(
        [500.0] * 20, [500] * 20, env_steps=loop.run.env_steps, wall_s=1.0
    )
    loop.run.recorder.solved_at_env_steps = 1234
    loop.checkpoint()
    loop.run.recorder.close()

    again = _fresh_loop(tmp_path, redis_url)
    ckpt = load_checkpoint(str(tmp_path)).state
    resume(again, ckpt)
    assert again.run.version == loop.run.version + 1
    assert again.run.env_steps == loop.run.env_steps
    assert (
        again.admission.discarded_env_steps == loop.admission.discarded_env_steps == 16
    )  # the stale batch
    assert again.run.trained_samples == loop.run.trained_samples
    assert again.admission.produced_batches == loop.admission.produced_batches
    assert again.admission.gate.accepted == loop.admission.gate.accepted
    assert again.admission.gate.ages == loop.admission.gate.ages
    assert again.admission.rejects() == {"stale": 1, "bad_shape": 2}
    assert again.run.recorder.solved_at_env_steps == 1234
    assert list(again.run.recorder.window) == list(loop.run.recorder.window)
    assert again.run.recorder.episodes == loop.run.recorder.episodes
    assert again.admission.actors.keys() == loop.admission.actors.keys()
    assert dict(again.run.phase_totals) == dict(loop.run.phase_totals)
    assert again.run.restarts == 1
    assert again.run.wall_s >= ckpt["counters"]["wall_s"]


def test_a_restart_adopts_weights_published_after_its_checkpoint(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _trained_loop(tmp_path, redis_url)
    loop.checkpoint()
    checkpointed = {k: v.copy() for k, v in numpy_state(loop.trainer.policy).items()}
    for seq in range(2):  # two more updates, published but never checkpointed
        batches.put(_sample(runner, inference, "a", loop.run.version, 10 + seq))
        assert loop.step(WarmStop())
    newest = numpy_state(loop.trainer.policy)
    assert any(not np.array_equal(newest[k], checkpointed[k]) for k in newest)
    loop.run.recorder.close()

    again = _fresh_loop(tmp_path, redis_url)
    resume(again, load_checkpoint(str(tmp_path)).state)
    # The newest weights (not the checkpoint's) under the next number: actors waiting for
    # a version above the one they hold start sending again.
    assert again.run.version == loop.run.version + 1
    for name, arr in numpy_state(again.trainer.policy).items():
        np.testing.assert_array_equal(arr, newest[name])
    again.publish()
    header, blob = again.publisher.store.fetch(again.run.version, verify=True)
    for name, arr in unpack_tensors(header, blob).items():
        np.testing.assert_array_equal(arr, newest[name])


def test_a_restart_publishes_its_version_when_redis_lost_it(tmp_path, redis_url):
    loop, *_ = _trained_loop(tmp_path, redis_url)
    loop.checkpoint()
    loop.run.recorder.close()
    loop.publisher.redis.flushall()  # Redis restarted without persistence
    again = _fresh_loop(tmp_path, redis_url)
    resume(again, load_checkpoint(str(tmp_path)).state)
    assert again.run.version == loop.run.version + 1
    again.publish()
    header, _ = again.publisher.store.fetch(again.run.version)
    assert header.learner_step == loop.trainer.updates


def test_resume_cuts_run_dir_rows_written_after_the_checkpoint(tmp_path):
    rec = RunRecorder(tmp_path, solve_threshold=None)
    rec.add_episodes([10.0], [10], env_steps=100, wall_s=1.0)
    rec.add_update({"version": 1, "env_steps": 100}, env_steps=100)
    state = rec.get_state()
    rec.add_episodes([20.0], [20], env_steps=200, wall_s=2.0)  # lost with the crash
    rec.add_update({"version": 2, "env_steps": 200}, env_steps=200)
    rec.close()
    again = RunRecorder(tmp_path, solve_threshold=None)
    again.set_state(state, env_steps=100)
    again.add_episodes([30.0], [30], env_steps=150, wall_s=1.5)
    again.add_update({"version": 2, "env_steps": 150}, env_steps=150)
    again.close()
    episodes = (tmp_path / "episodes.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in episodes] == ["env_steps", "100", "150"]
    progress = (tmp_path / "progress.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in progress] == ["version", "1", "2"]
    assert json.loads(json.dumps(state))["episodes"] == 1
    assert torch.tensor(list(again.window)).tolist() == [10.0, 30.0]


def test_a_learner_without_a_checkpoint_goes_on_from_the_runs_newest_weights(tmp_path, redis_url):
    loop, *_ = _trained_loop(tmp_path / "first", redis_url)
    newest = numpy_state(loop.trainer.policy)
    loop.run.recorder.close()
    again = _fresh_loop(tmp_path / "second", redis_url)  # a new run dir: no checkpoint
    resume(again, None)
    assert again.run.version == loop.run.version + 1
    for name, arr in numpy_state(again.trainer.policy).items():
        np.testing.assert_array_equal(arr, newest[name])


def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(tmp_path):
    import hashlib
    import os
    import pickle

    from ppomq.learner.checkpoint import CKPT_NAME, MAGIC, CheckpointDamaged

    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    # Checksummed as a real one is: only the unpickler stands between it and running code.
    payload = pickle.dumps({"trainer": Payload(), "version": 3, "counters": {}})
    meta = {"sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload),
            "version": 3, "weights_sha256": "0" * 64}  # fmt: skip
    path = tmp_path / CKPT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MAGIC + json.dumps(meta).encode() + b"\n" + payload)
    with pytest.raises(CheckpointDamaged) as refused:
        load_checkpoint(str(tmp_path))
    assert not marker.exists(), "the checkpoint's pickle payload ran"
    text = str(refused.value)
    assert str(path) in text and "\n" not in text
    assert "arbitrary code" in text


def test_a_finished_run_whose_end_is_already_reached_resumes_to_nothing(tmp_path, redis_url):
    # The same command again: no new version, not a restart, nothing to publish.
    loop, *_ = _trained_loop(tmp_path, redis_url)
    loop.run.finished = True
    loop.checkpoint()
    loop.run.recorder.close()
    ckpt = load_checkpoint(str(tmp_path)).state

    ended = _fresh_loop(tmp_path, redis_url, total_steps=loop.run.env_steps)
    assert resume(ended, ckpt) is False
    assert ended.run.version == loop.run.version and ended.run.restarts == loop.run.restarts == 0
    ended.run.recorder.close()

    more = _fresh_loop(
        tmp_path, redis_url, total_steps=loop.run.env_steps + 1
    )  # a higher --total-steps: it goes on
    assert resume(more, ckpt) is True
    assert more.run.version == loop.run.version + 1 and more.run.restarts == 1


def test_marking_a_run_finished_announces_it_on_the_weights_channel(tmp_path, redis_url):
    """Weightservers read the `finished` marker when an announcement wakes them: the mark
    comes with one, so they tell their actors at once, not at their next poll."""
    from ppomq.learner.finish import mark_finished

    loop, *_ = _trained_loop(tmp_path, redis_url, updates=1)
    pubsub = loop.publisher.redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(loop.publisher.keys.channel)
    assert pubsub.get_message(timeout=1.0) is None  # subscribed, nothing announced yet
    mark_finished(loop)
    msg = pubsub.get_message(timeout=5.0)
    assert msg is not None and msg["data"] == str(loop.run.version).encode()
    assert (
        json.loads(loop.publisher.redis.get(loop.publisher.keys.finished))["version"]
        == loop.run.version
    )
    pubsub.close()
    loop.run.recorder.close()
