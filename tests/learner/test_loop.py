"""LearnerLoop, driven directly (one test through the receiving thread and real sockets):
the staleness gate, what counts of a batch, seqs, publishing, status and checkpoints."""

from __future__ import annotations

import json
import math
import queue
import threading
import time

import msgpack
import pytest
import redis
import torch

from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.core.models import build_model, model_spec_for
from ppomq.core.rundir import RunRecorder
from ppomq.core.settings import LearnerSettings, load_settings
from ppomq.core.signals import WarmStop
from ppomq.core.store.connect import connect_redis
from ppomq.core.store.embedded import free_port
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import WeightStore
from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender
from ppomq.learner.checkpoint import load_checkpoint
from ppomq.learner.door import Door
from ppomq.learner.episodes import EpisodeBook
from ppomq.learner.grants import per_actor_grants
from ppomq.learner.loop import build_loop
from ppomq.learner.receiver import BatchReceiver
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from ppomq.proto import EpisodeStats, SeqTracker, encode
from tests.support.waiting import wait_until


class _Clock:
    """The roster's clock, moved by the test: silence without waiting for it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _setup(tmp_path, redis_url, metrics=None, clock=time.monotonic, **overrides):
    s = load_settings(LearnerSettings, {
        "run_id": "loop", "run_dir": str(tmp_path), "num_envs": 2, "num_steps": 8,
        "actors": 2, "update_epochs": 1, "redis_url": redis_url, **overrides,
    })  # fmt: skip
    spec = rollout_spec_for("CartPole-v1", run_id="loop", num_steps=8, max_bytes=1 << 24)
    policy = build_model(model_spec_for(spec, hidden=[8]))
    redis = connect_redis(redis_url)
    batches: queue.Queue = queue.Queue()
    loop = build_loop(
        settings=s, trainer=PPOTrainer(policy=policy, config=PPOConfig.from_settings(s)),
        store=WeightStore(redis, "loop", keep_versions=s.keep_versions), batches=batches,
        recorder=RunRecorder(tmp_path, solve_threshold=475.0), door=Door(),
        seqs=SeqTracker(), book=EpisodeBook(max_actors=s.max_actors), metrics=metrics,
        clock=clock,
    )  # fmt: skip
    loop.run.version = 5
    envs = make_vector_env("CartPole-v1", 2, [env_seed(0, 0, i) for i in range(2)])
    runner = EnvRunner(envs=envs, spec=spec, run_id="loop", actor_id="a", env_id="CartPole-v1")
    return loop, batches, runner, policy.inference(), redis


def test_one_step_trains_on_admitted_batches_and_publishes_the_next_version(tmp_path, redis_url):
    loop, batches, runner, inference, redis = _setup(tmp_path, redis_url, max_staleness=2)
    for seq, version in enumerate([2, 4, 5]):  # the first is 3 versions old: stale
        batches.put(runner.sample(inference, policy_version=version, seq=seq))
    assert loop.step(WarmStop())
    assert loop.run.version == 6
    assert loop.publisher.store.latest_version() == 6
    assert loop.admission.gate.rejected == {"stale": 1} and loop.admission.gate.accepted == 2
    assert loop.run.env_steps == 2 * 16  # accepted batches only
    assert loop.admission.discarded_env_steps == 16  # the stale one's, reported beside them
    assert loop.admission.produced_batches == 3  # batches received
    status = json.loads(redis.get(RunKeys("loop").stats))
    assert status["version"] == 6 and status["rejects"] == {"stale": 1}
    assert status["env_steps"] == 32 and status["discarded_env_steps"] == 16


def test_sync_mode_waits_for_one_current_batch_per_actor(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url, mode="sync")
    batches.put(_sample(runner, inference, "a", 4, 0))  # stale in sync mode
    batches.put(_sample(runner, inference, "a", 5, 1))
    batches.put(_sample(runner, inference, "b", 5, 2))
    assert loop.step(WarmStop())
    assert loop.admission.gate.accepted == 2 and loop.admission.gate.rejected == {"stale": 1}


def test_checkpoint_holds_what_a_restart_needs(tmp_path, redis_url):
    # One actor's two batches of one version: within its share of 2.
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url, batches_per_version=2)
    for seq in range(2):
        batches.put(runner.sample(inference, policy_version=5, seq=seq))
    loop.step(WarmStop())
    loop.checkpoint()
    ckpt = load_checkpoint(str(tmp_path)).state
    assert ckpt["version"] == 6 and ckpt["counters"]["env_steps"] == 32
    assert ckpt["run_id"] == "loop"
    restored = build_model(loop.trainer.policy.spec)
    restored.load_state_dict(ckpt["trainer"]["policy"])
    for a, b in zip(restored.parameters(), loop.trainer.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_publish_waits_out_a_redis_outage_instead_of_crashing(tmp_path, start_redis, caplog):
    server = start_redis()
    url = f"redis://127.0.0.1:{server.port}/0"
    loop, *_ = _setup(tmp_path, url)
    loop.publish()
    server.stop()
    loop.run.version += 1
    done = threading.Event()
    worker = threading.Thread(target=lambda: (loop.publish(WarmStop()), done.set()))
    worker.start()
    wait_until(lambda: "retrying the publish" in caplog.text, 30, "a publish retried")
    assert worker.is_alive() and not done.is_set()  # still retrying, not crashed
    server.start()  # same port, same (empty) data: Redis came back
    worker.join(timeout=30)
    assert done.is_set()
    assert loop.publisher.store.latest_version() == loop.run.version


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


def _sample(runner, inference, actor_id: str, version: int, seq: int):
    """A batch of `actor_id`, from an env runner of its own (made like `runner` on first
    use): the learner follows each actor's episodes across its batches."""
    own = runner.__dict__.setdefault("by_actor", {runner.actor_id: runner})
    if actor_id not in own:
        envs = make_vector_env("CartPole-v1", 2, [env_seed(len(own), 0, i) for i in range(2)])
        own[actor_id] = EnvRunner(envs=envs, spec=runner.spec, run_id=runner.run_id,
                                  actor_id=actor_id, env_id=runner.env_id)  # fmt: skip
    return own[actor_id].sample(inference, policy_version=version, seq=seq)


def _with(batch, *, seq=None, returns=None):
    if seq is not None:
        batch.seq = seq
    if returns is not None:
        batch.episodes = EpisodeStats(list(returns), [10] * len(returns))
    return batch


def test_stale_batches_add_no_env_steps_episodes_solve_or_lr_progress(tmp_path, redis_url):
    """a forged stale batch with huge returns ended a --target-return run as
    solved, and stale env steps ended --total-steps runs early and moved the lr."""
    total = 10_000
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=1, max_staleness=1, target_return=100.0,
        total_steps=total, learning_rate=1e-3,
    )  # fmt: skip
    accepted_returns: list[float] = []
    for seq in range(3):
        honest = _sample(runner, inference, "a", loop.run.version, seq)
        # Stale, with episodes that are what their own rewards make (huge ones): refused
        # by the staleness gate, not by the episode check.
        forged = []
        for k in range(4):
            b = _sample(runner, inference, f"f{k}", 0, seq)
            b.arrays["rewards"] *= 1e6
            b.episodes.returns[:] = [r * 1e6 for r in b.episodes.returns]
            forged.append(b)
        for b in [*forged, honest]:
            batches.put(b)
        assert loop.step(WarmStop())
        accepted_returns += honest.episodes.returns
        accepted_steps = (seq + 1) * 16
        assert loop.run.env_steps == accepted_steps
        want_lr = 1e-3 * (1 - accepted_steps / total)
        assert loop.run.last_stats["charts/learning_rate"] == pytest.approx(want_lr, rel=1e-12)
    assert loop.admission.discarded_env_steps == 3 * 4 * 16
    assert loop.admission.gate.rejected == {"stale": 12}
    assert loop.run.recorder.episodes == len(accepted_returns)
    assert list(loop.run.recorder.window) == accepted_returns[-20:]
    assert loop.run.recorder.solved_at_env_steps is None
    assert not loop.run.done()
    assert (
        loop.admission.actors["f0"]["env_steps"] == 0
        and loop.admission.actors["f0"]["batches"] == 3
    )
    assert loop.admission.actors["f0"]["discarded_env_steps"] == 3 * 16
    assert loop.run.last_stats["charts/discarded_env_steps"] == 3 * 4 * 16


def test_stale_env_steps_do_not_end_a_total_steps_run(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=1, max_staleness=0, total_steps=64
    )
    for seq in range(10):  # 160 stale env steps: more than --total-steps
        batches.put(_sample(runner, inference, "f", 0, seq))
    batches.put(_sample(runner, inference, "a", loop.run.version, 0))
    assert loop.step(WarmStop())
    assert loop.run.env_steps == 16 and loop.admission.discarded_env_steps == 160
    assert not loop.run.done()


def test_a_refused_batch_leaves_its_actors_seq_unchanged(tmp_path, redis_url):
    """A spoofed stale batch under an honest actor's id with seq 2^64-1 locked
    that actor out (every later seq was "not increasing"): only acceptance records a seq.
    Through the learner's receiving thread and real ZeroMQ sockets, as in the service."""
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url, actors=1, max_staleness=1)
    spec = rollout_spec_for("CartPole-v1", run_id="loop", num_steps=8, max_bytes=1 << 24)
    addr = f"tcp://127.0.0.1:{free_port()}"
    receiver = BatchReceiver(
        make_socket=lambda: RolloutReceiver(addr), spec=spec, out=batches,
        door=loop.admission.door, seqs=loop.admission.seqs, book=loop.admission.book,
    )  # fmt: skip
    receiver.start()
    receiver.ready.wait()
    sender = RolloutSender(addr)
    try:

        def send(actor: str, version: int, seq: int) -> None:
            frames = encode(_sample(runner, inference, actor, version, 0))
            header = msgpack.unpackb(frames[0])
            header["seq"] = seq  # up to 2^64 - 1, past what encode packs
            assert sender.send([msgpack.packb(header), *frames[1:]], timeout_ms=5000)

        send("honest", loop.run.version, 0)
        assert loop.step(WarmStop())
        send("honest", 0, 2**64 - 1)  # stale
        send("honest", 99, 2**64 - 1)  # from the future
        send("honest", loop.run.version, 1)
        assert loop.step(WarmStop())
        for seq in (2, 3):  # training goes on
            send("honest", loop.run.version, seq)
            assert loop.step(WarmStop())
    finally:
        sender.close()
        receiver.stop()
        receiver.join(timeout=5)
    # The stale and the future batch are refused at the door, the loop's bounds.
    assert loop.admission.door.snapshot() == (4, {"stale": 1, "future_version": 1})
    assert loop.admission.gate.accepted == 4 and loop.run.version == 9
    assert loop.admission.rejects() == {"stale": 1, "future_version": 1}


def test_a_replayed_seq_queued_behind_its_original_is_refused(tmp_path, redis_url):
    """The receiver only checks a seq against accepted ones, so two queued batches of one
    actor can both pass it: the loop's check at acceptance refuses the second."""
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=1, batches_per_version=2, batch_samples=16
    )
    first = _sample(runner, inference, "a", loop.run.version, 7)
    batches.put(first)
    batches.put(_with(_sample(runner, inference, "a", loop.run.version, 0), seq=7))
    batches.put(_with(_sample(runner, inference, "a", loop.run.version, 0), seq=6))
    batches.put(_sample(runner, inference, "a", loop.run.version, 8))
    assert loop.step(WarmStop())
    assert loop.step(WarmStop())
    assert loop.admission.gate.accepted == 2
    assert loop.admission.rejects() == {"seq_not_increasing": 2}
    assert loop.run.env_steps == 32 and loop.admission.discarded_env_steps == 32


def test_async_update_does_not_wait_for_actors_that_never_come(tmp_path, redis_url):
    # The hint says 3 actors; only one exists. The update waits at most the actor timeout.
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url, actors=3, actor_timeout_s=0.3)
    batches.put(_sample(runner, inference, "only", 5, 0))
    t0 = time.monotonic()
    assert loop.step(WarmStop())
    assert time.monotonic() - t0 < 10  # liveness bound, not a timing claim
    assert loop.run.version == 6 and loop.admission.gate.accepted == 1


def test_async_update_waits_for_every_live_actor_then_drops_a_silent_one(tmp_path, redis_url):
    loop, batches, runner, inference, _ = _setup(tmp_path, redis_url, actors=2, actor_timeout_s=1.0)
    for i, actor in enumerate(("a", "b")):
        batches.put(_sample(runner, inference, actor, 5, i))
    assert loop.step(WarmStop())
    batches.put(_sample(runner, inference, "a", 6, 2))
    batches.put(_sample(runner, inference, "b", 6, 3))
    assert loop.step(WarmStop())
    assert loop.run.last_stats["charts/samples"] == 2 * 16  # one batch from each live actor
    batches.put(_sample(runner, inference, "a", 7, 4))  # b is gone now
    assert loop.step(WarmStop())  # waits for b until it is silent for 1 s, then goes on
    assert loop.run.version == 8 and loop.run.last_stats["charts/samples"] == 16


def _epochs_lasting(seconds: float, tmp_path, redis_url) -> int:
    """Update epochs that make one update of two batches last about `seconds` on this
    machine as loaded now (measured on 50 epochs, once warm)."""
    loop, _, runner, inference, _ = _setup(tmp_path, redis_url, update_epochs=50)
    two = [_sample(runner, inference, actor, 5, seq) for seq, actor in enumerate("ab")]
    taken = min(loop.trainer.update(two, 0)["time/learner_sgd"] for _ in range(3))
    return max(50, math.ceil(50 * seconds / taken))


def test_the_learners_own_long_update_is_no_actor_silence_but_a_silent_actor_still_is(
    tmp_path, redis_url, caplog
):
    """Actors wait for the new version while the learner trains: an update longer than
    --actor-timeout-s (here a real one, of many epochs) used to read as that much silence
    from every actor, so each update warned and went on without them. Only what an actor
    owes while the learner waits counts; one that really stops sending is still left out."""
    timeout = 0.25
    epochs = _epochs_lasting(4 * timeout, tmp_path / "calibration", redis_url)
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=2, actor_timeout_s=timeout, update_epochs=epochs
    )
    first = [_sample(runner, inference, actor, 5, seq) for seq, actor in enumerate("ab")]
    # Sampled ahead: both actors send for the new version as soon as it is published.
    second = [_sample(runner, inference, actor, 6, seq) for seq, actor in enumerate("ab", 2)]
    third = _sample(runner, inference, "a", 7, 4)
    for batch in first:
        batches.put(batch)
    assert loop.step(WarmStop())
    # What makes the test: the update outlasted the timeout.
    assert loop.run.last_stats["time/learner_sgd"] > timeout
    for batch in second:
        batches.put(batch)
    assert loop.step(WarmStop())
    assert loop.run.last_stats["charts/samples"] == 2 * 16  # b was waited for
    assert "silent" not in caplog.text
    batches.put(third)  # b sends nothing more
    assert loop.step(WarmStop())
    assert loop.run.last_stats["charts/samples"] == 16
    assert "actor b silent" in caplog.text
    # a, which sent all it may for that version, was waiting for the learner, not silent.
    assert "actor a silent" not in caplog.text


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_refused_batches_under_made_up_ids_are_not_actors_an_update_waits_for(
    tmp_path, redis_url, mode
):
    """forged ids used to become live actors, so each update waited for their
    batches until they fell silent (--actor-timeout-s)."""
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, mode=mode, actors=1, actor_timeout_s=600, max_staleness=0
    )  # fmt: skip
    batches.put(_sample(runner, inference, "honest", 5, 0))
    assert loop.step(WarmStop())
    for k in range(50):  # stale, one per made-up id
        batches.put(_sample(runner, inference, f"forged-{k}", 0, k))
    batches.put(_sample(runner, inference, "honest", 6, 1))
    assert loop.step(WarmStop())
    assert loop.admission.roster.live() == {"honest"} and loop.admission.roster.expected() == 1
    assert loop.run.version == 7 and loop.admission.gate.rejected == {"stale": 50}
    assert loop.run.last_stats["charts/samples"] == 16


def test_sync_quorum_drops_a_silent_actor_and_takes_a_new_one(tmp_path, redis_url):
    clock = _Clock()
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, mode="sync", actors=2, actor_timeout_s=0.3, clock=clock
    )
    batches.put(_sample(runner, inference, "a", 5, 0))
    batches.put(_sample(runner, inference, "b", 5, 1))
    assert loop.step(WarmStop())
    clock.now += 0.4
    batches.put(_sample(runner, inference, "a", 6, 2))  # b was killed: quorum shrinks
    assert loop.step(WarmStop())
    assert loop.run.version == 7 and loop.run.last_stats["charts/samples"] == 16
    batches.put(_sample(runner, inference, "a", 7, 3))
    batches.put(_sample(runner, inference, "c", 7, 4))  # a new actor joins
    assert loop.step(WarmStop())
    assert loop.run.last_stats["charts/samples"] == 2 * 16
    assert loop.admission.gate.rejected == {}


def test_sync_waits_again_for_a_known_actor_whose_batch_came_stale(tmp_path, redis_url):
    """An actor trained on before whose batch arrives stale (the quorum went on without it)
    is live again: the next update waits for its batch on the new version."""
    clock = _Clock()
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, mode="sync", actors=2, actor_timeout_s=1.0, clock=clock
    )
    batches.put(_sample(runner, inference, "a", 5, 0))
    batches.put(_sample(runner, inference, "b", 5, 1))
    assert loop.step(WarmStop())
    clock.now += 1.1  # both silent past the timeout: the next quorum is whoever sends
    batches.put(_sample(runner, inference, "a", 6, 2))
    assert loop.step(WarmStop())  # version 7, without b
    batches.put(_sample(runner, inference, "b", 6, 3))  # b's late batch: stale, b is back
    batches.put(_sample(runner, inference, "a", 7, 4))
    late = threading.Timer(0.2, lambda: batches.put(_sample(runner, inference, "b", 7, 5)))
    late.start()
    try:
        assert loop.step(WarmStop())
    finally:
        late.join()
    assert loop.run.last_stats["charts/samples"] == 2 * 16  # it waited for b's batch on 7
    assert loop.admission.gate.rejected == {"stale": 1}


def test_a_publish_whose_reply_is_lost_after_the_commit_is_not_retried_into_a_crash(
    tmp_path, redis_server
):
    from tests.redis_proxy import LostExecReplyProxy

    proxy = LostExecReplyProxy(redis_server.port)
    try:
        redis.Redis.from_url(redis_server.url).flushall()
        loop, *_ = _setup(tmp_path, proxy.url)
        loop.publish()
        proxy.armed.set()
        loop.run.version += 1
        loop.publish(WarmStop())  # committed, reply lost, retried: must not raise
        assert proxy.dropped.is_set()  # the fault really happened
        assert loop.publisher.store.latest_version() == loop.run.version
    finally:
        proxy.close()


def test_a_failing_final_evaluation_still_writes_the_summary(tmp_path, redis_url, caplog):
    from ppomq.learner.finish import finish_run

    # The policy is CartPole's; evaluating it on Pendulum fails (another observation shape).
    loop, *_ = _setup(tmp_path, redis_url, env_id="Pendulum-v1", eval_episodes=2)
    finish_run(loop, loop.s, threshold=None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final_eval_return"] is None
    assert (tmp_path / "final_weights.pt").exists()
    assert "final evaluation failed" in caplog.text


@pytest.mark.parametrize("draw", [True, False])
def test_the_learner_draws_the_learning_curve_unless_told_not_to(tmp_path, redis_url, draw):
    # `ppomq train` tells its learner not to (it draws the curve itself, see
    # ppomq.launch.learning_curve); a learner on its own draws it.
    from ppomq.learner.finish import finish_run

    loop, *_ = _setup(tmp_path, redis_url, eval_episodes=0, learning_curve=draw)
    loop.run.recorder.add_episodes([10.0, 30.0], [10, 30], env_steps=64, wall_s=0.1)
    finish_run(loop, loop.s, threshold=None)
    assert json.loads((tmp_path / "summary.json").read_text())["episodes"] == 2
    assert (tmp_path / "learning_curve.png").exists() == draw


def test_the_final_evaluation_says_on_the_event_stream_that_it_runs(tmp_path, redis_url):
    from ppomq.core.events import EventWriter, read_events
    from ppomq.learner.finish import finish_run

    loop, *_ = _setup(tmp_path, redis_url, eval_episodes=3)
    finish_run(loop, loop.s, threshold=None, events=EventWriter(tmp_path / "ev.jsonl", "learner"))
    said = [e for e in read_events(tmp_path / "ev.jsonl") if e["event"] == "learner.evaluate"]
    assert said and (said[0]["episodes"], said[0]["done"], said[0]["steps"]) == (3, 0, 0)
    assert json.loads((tmp_path / "summary.json").read_text())["final_eval_return"] is not None


def test_the_final_evaluation_is_bounded_timed_apart_and_no_actor_silence(
    tmp_path, redis_url, caplog
):
    """An evaluation as long as Pong's used to be counted in the run's time (its SPS fell
    to a third) and as every actor's silence; now it ends at --eval-timeout-s, its time is
    its own, and the actors' silence clock stands still while it runs."""
    from ppomq.learner.finish import finish_run

    timeout = 0.25
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=2, actor_timeout_s=timeout,
        eval_episodes=100_000, eval_timeout_s=1.0,
    )  # fmt: skip
    for seq, actor in enumerate("ab"):
        batches.put(_sample(runner, inference, actor, 5, seq))
    assert loop.step(WarmStop())
    trained_s = loop.run.wall_s
    finish_run(loop, loop.s, threshold=None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    ev = summary["final_eval"]
    assert ev["cut_short"] and 0 < ev["episodes"] < 100_000 and ev["episodes_asked"] == 100_000
    assert 1.0 <= ev["seconds"] < 10.0  # what makes the test: 4 actor timeouts and more
    assert summary["final_eval_return"] == ev["mean_return"] is not None
    assert summary["wall_seconds"] < trained_s + 0.5  # training's time, not the evaluation's
    # SPS over the same (training) time: the summary rounds the time to 1 ms, the SPS not.
    steps_from_sps = summary["sps"] * summary["wall_seconds"]
    assert steps_from_sps == pytest.approx(summary["total_env_steps"], abs=summary["sps"] * 6e-4)
    assert "silent" not in caplog.text


@pytest.mark.parametrize("actors", [1, 2, 4])
def test_update_size_is_the_setting_whatever_number_of_actors_is_live(tmp_path, redis_url, actors):
    # Run-ahead actors (batches_per_version 0): every update is batch_samples (4 batches
    # of 16) whether 1, 2 or 4 actors send them; more actors only fill it sooner.
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=actors, batch_samples=64, batches_per_version=0
    )
    ids = [f"actor-{i}" for i in range(actors)]
    for seq in range(8):
        batches.put(_sample(runner, inference, ids[seq % actors], 5, seq))
    sizes = []
    for _ in range(2):
        assert loop.step(WarmStop())
        sizes.append(loop.run.last_stats["charts/samples"])
    assert sizes == [64, 64]
    assert batches.empty() and loop.admission.gate.accepted == 8


def test_lock_step_actors_beyond_a_fixed_update_size_wait_for_the_next_update(tmp_path, redis_url):
    # 4 live lock-step actors, fixed updates of 2 batches: the update does not grow with
    # them; the other two batches are the next update's (one version old, still admissible).
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=2, batches_per_version=1, max_staleness=2, batch_samples=32
    )
    for seq, actor in enumerate("abcd"):
        batches.put(_sample(runner, inference, actor, 5, seq))
    assert loop.step(WarmStop())
    assert loop.run.last_stats["charts/samples"] == 32 and loop.run.version == 6
    assert loop.step(WarmStop())
    assert loop.run.last_stats["charts/samples"] == 32 and loop.admission.gate.accepted == 4


def test_the_per_actor_rule_trains_a_batch_from_every_live_actor(tmp_path, redis_url):
    # The default rule: no fixed size. The first update has the hinted two actors and
    # what is queued besides (two more actors' batches); the next waits for a batch from
    # each of the four: it grows with them, and every batch sent is trained on.
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=2, batches_per_version=1, max_staleness=2
    )
    assert loop.update_samples is None
    for seq, actor in enumerate("abcd"):
        batches.put(_sample(runner, inference, actor, 5, seq))
    assert loop.step(WarmStop())
    assert loop.run.last_stats["charts/samples"] == 4 * 2 * 8 and loop.run.version == 6
    for seq, actor in enumerate("abc", start=4):
        batches.put(_sample(runner, inference, actor, 6, seq))
    waiting = threading.Timer(0.5, lambda: batches.put(_sample(runner, inference, "d", 6, 7)))
    waiting.start()
    assert loop.step(WarmStop())  # it waited for d: a live actor
    waiting.join()
    assert loop.run.last_stats["charts/samples"] == 4 * 2 * 8 and batches.empty()
    assert loop.admission.gate.accepted == 8
    assert loop.plan_grants() == per_actor_grants(1)


def test_lock_step_update_trains_once_every_live_actor_has_sent_its_quota(tmp_path, redis_url):
    # One live actor that may send one batch per version cannot fill a 4-batch update:
    # the learner trains on it once the discovery window is over, without a timeout.
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=1, batch_samples=64, batches_per_version=1,
        actor_timeout_s=30.0,
    )  # fmt: skip
    batches.put(_sample(runner, inference, "a", 5, 0))
    assert loop.step(WarmStop())  # the hint is 1: the quorum is this actor
    assert loop.run.last_stats["charts/samples"] == 16


def test_published_weights_tell_actors_how_far_they_may_run_ahead(tmp_path, redis_url):
    from ppomq.learner.publisher import actor_config

    loop, *_ = _setup(tmp_path, redis_url, batches_per_version=3)
    assert actor_config(loop.s) == {"batches_per_version": 3, "num_steps": loop.s.num_steps}
    loop, *_ = _setup(tmp_path / "sync", redis_url, batches_per_version=3, mode="sync")
    assert actor_config(loop.s) == {"batches_per_version": 1, "num_steps": loop.s.num_steps}


def test_sync_never_waits_for_made_up_ids_that_only_just_missed_an_update(tmp_path, redis_url):
    """A batch one version behind is what a newly started actor sends, and what a forger
    sends under 50 fresh ids for free: with the hinted actor live, none is waited for (each
    used to hold the quorum up for --actor-timeout-s, here 600 s)."""
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, mode="sync", actors=1, actor_timeout_s=600
    )
    batches.put(_sample(runner, inference, "honest", 5, 0))
    assert loop.step(WarmStop())
    for k in range(50):  # version 5 at version 6: only just missed
        batches.put(_sample(runner, inference, f"made-up-{k}", 5, k))
    batches.put(_sample(runner, inference, "honest", 6, 1))
    stop = WarmStop()
    # A liveness bound, not a timing claim: a quorum waiting for the made-up ids ends
    # only by this stop, without an update.
    timer = threading.Timer(20.0, lambda: setattr(stop, "requested", True))
    timer.start()
    try:
        assert loop.step(stop)
    finally:
        timer.cancel()
    assert loop.run.version == 7 and loop.admission.gate.rejected == {"stale": 50}
    assert loop.admission.roster.live() == {"honest"}
