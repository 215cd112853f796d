"""A checkpoint is verified before a learner trusts it: damaged, bit-flipped, missing or at
odds with Redis, it stops the learner in one line with the safe ways on; `--recover` goes on
from the previous checkpoint or rebuilds the counters from the run dir's records."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from ppomq.core.errors import UsageError
from ppomq.core.models import numpy_state
from ppomq.core.rundir import RecordsDamaged, records_up_to
from ppomq.core.signals import WarmStop
from ppomq.learner.checkpoint import (
    CKPT_NAME,
    PREVIOUS_NAME,
    CheckpointDamaged,
    load_checkpoint,
    read_checkpoint,
)
from ppomq.learner.recovery import choose_start, resume

from .test_loop import _sample, _setup


def _trained(tmp_path: Path, redis_url: str, updates: int = 3):
    loop, batches, runner, inference, _ = _setup(
        tmp_path, redis_url, actors=1, checkpoint_interval_s=3600
    )
    for seq in range(updates):
        batches.put(_sample(runner, inference, "a", loop.run.version, seq))
        assert loop.step(WarmStop())
        # Episodes as a run records them: rows in episodes.csv at each update's env steps.
        loop.run.recorder.add_episodes([10.0 + seq], [10], env_steps=loop.run.env_steps, wall_s=1.0)
        loop.checkpoint()
    loop.run.recorder.close()
    return loop


def _fresh(tmp_path: Path, redis_url: str, **overrides):
    loop, *_ = _setup(tmp_path, redis_url, actors=1, **overrides)
    loop.run.version = 0
    return loop


def _files(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and "tb" not in p.parts
    }


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "random":
        path.write_bytes(os.urandom(len(data)))
    else:  # 64 bytes flipped near the end, where the weights' storage is
        flipped = bytearray(data)
        for i in range(len(data) - 600, len(data) - 536):
            flipped[i] ^= 0xFF
        path.write_bytes(bytes(flipped))


@pytest.mark.parametrize("how", ["truncated", "empty", "random", "bit-flipped"])
def test_a_damaged_checkpoint_stops_the_learner_in_one_line_and_changes_nothing(
    tmp_path, redis_url, how
):
    loop = _trained(tmp_path, redis_url)
    _damage(tmp_path / CKPT_NAME, how)
    before = _files(tmp_path)
    with pytest.raises(UsageError) as stopped:
        choose_start(tmp_path, loop.publisher.store, recover=False)
    text = str(stopped.value)
    assert "\n" not in text and str(tmp_path / CKPT_NAME) in text and "damaged" in text
    assert "--recover" in text and "--run-dir" in text
    assert _files(tmp_path) == before


def test_a_bit_flip_in_the_saved_weights_is_caught_by_the_files_checksum(tmp_path, redis_url):
    _trained(tmp_path, redis_url)
    _damage(tmp_path / CKPT_NAME, "bit-flipped")
    with pytest.raises(CheckpointDamaged, match="does not match its sha256"):
        read_checkpoint(tmp_path / CKPT_NAME)


def test_weights_that_differ_from_the_version_redis_holds_are_refused(tmp_path, redis_url):
    import msgpack

    from ppomq.core.store.keys import HEADER_FIELD

    loop = _trained(tmp_path, redis_url)
    # Redis's version of the checkpoint's number says other weights (another learner's
    # version under that number, or the checkpoint's weights changed since).
    key = loop.publisher.store.keys.weights(loop.run.version)
    header = msgpack.unpackb(loop.publisher.redis.hget(key, HEADER_FIELD))
    header["sha256"] = "0" * 64
    loop.publisher.redis.hset(key, HEADER_FIELD, msgpack.packb(header))
    with pytest.raises(UsageError, match=f"weights of version {loop.run.version} differ from"):
        choose_start(tmp_path, loop.publisher.store, recover=False)


def test_a_checkpoint_missing_beside_records_is_not_a_silent_restart_at_zero(tmp_path, redis_url):
    loop = _trained(tmp_path, redis_url)
    (tmp_path / CKPT_NAME).unlink()  # what "move it away" used to lead to
    (tmp_path / PREVIOUS_NAME).unlink()
    with pytest.raises(UsageError, match="missing, while the run dir holds the records"):
        choose_start(tmp_path, loop.publisher.store, recover=False)


def test_each_checkpoint_replaces_the_last_only_once_verified_keeping_it_beside(
    tmp_path, redis_url
):
    loop = _trained(tmp_path, redis_url, updates=2)
    current = load_checkpoint(tmp_path)
    previous = read_checkpoint(tmp_path / PREVIOUS_NAME)
    assert current.state["version"] == loop.run.version
    assert previous.state["version"] == loop.run.version - 1
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))


def test_recover_goes_on_from_the_previous_checkpoint_and_redis_newest(tmp_path, redis_url):
    loop = _trained(tmp_path, redis_url)
    newest = numpy_state(loop.trainer.policy)
    _damage(tmp_path / CKPT_NAME, "truncated")
    start = choose_start(tmp_path, loop.publisher.store, recover=True)
    assert start.state is not None and start.state["version"] == loop.run.version - 1
    assert list((tmp_path / "checkpoints").glob("ckpt.damaged-*.pt")), "damaged file kept"

    again = _fresh(tmp_path, redis_url)
    assert resume(again, start.state)
    assert again.run.version == loop.run.version + 1  # Redis's newest weights, the next number
    for name, arr in numpy_state(again.trainer.policy).items():
        np.testing.assert_array_equal(arr, newest[name])
    # The counters are the previous checkpoint's, and the records were cut to match.
    assert again.run.env_steps == start.state["counters"]["env_steps"]
    rows = (tmp_path / "episodes.csv").read_text().splitlines()[1:]
    assert all(int(row.split(",")[0]) <= again.run.env_steps for row in rows)
    assert (
        again.run.recorder.episodes == len(rows) == start.state["counters"]["recorder"]["episodes"]
    )
    again.run.recorder.close()


def test_recover_without_a_checkpoint_rebuilds_the_counters_from_the_records(tmp_path, redis_url):
    loop = _trained(tmp_path, redis_url)
    for name in (CKPT_NAME, PREVIOUS_NAME):
        _damage(tmp_path / name, "random")
    start = choose_start(tmp_path, loop.publisher.store, recover=True)
    assert start.state is None and start.rebuild

    again = _fresh(tmp_path, redis_url)
    assert resume(again, None, rebuild=True)
    assert again.run.version == loop.run.version + 1
    assert again.run.env_steps == loop.run.env_steps  # what Redis's newest version was trained at
    assert again.run.trained_samples == loop.run.trained_samples
    assert again.trainer.updates == loop.trainer.updates
    rows = (tmp_path / "episodes.csv").read_text().splitlines()[1:]
    assert again.run.recorder.episodes == len(rows) == loop.run.recorder.episodes
    assert list(again.run.recorder.window) == list(loop.run.recorder.window)
    again.run.recorder.close()


def test_a_damaged_record_row_is_named_with_its_file_and_line(tmp_path):
    path = tmp_path / "episodes.csv"
    path.write_text("env_steps,wall_s,return,length\n16,0.1,9.0,9\n\x00\x00garbage\n")
    with pytest.raises(RecordsDamaged, match=r"episodes.csv line 3 is damaged"):
        records_up_to(tmp_path, 100, solve_threshold=None)


def test_the_solve_point_is_recomputed_from_the_rows(tmp_path):
    rows = ["env_steps,wall_s,return,length"]
    rows += [f"{100 * i},{i}.0,{500.0 if i >= 5 else 1.0},500" for i in range(1, 40)]
    (tmp_path / "episodes.csv").write_text("\n".join(rows) + "\n")
    records = records_up_to(tmp_path, 3000, solve_threshold=475.0)
    # The 20-episode mean first reaches 475 when 19 of 20 are 500s: episode 23, at 2,300.
    assert records["recorder"]["solved_at_env_steps"] == 2300
    assert records["recorder"]["episodes"] == 30


def test_a_torn_last_line_is_dropped_on_resume_not_taken_for_damage(tmp_path):
    from ppomq.core.rundir import RunRecorder

    rec = RunRecorder(tmp_path, solve_threshold=None)
    rec.add_episodes([10.0], [10], env_steps=100, wall_s=1.0)
    rec.close()
    with open(tmp_path / "episodes.csv", "a") as fh:
        fh.write("200,2.0,2")  # a full disk cut the row short
    again = RunRecorder(tmp_path, solve_threshold=None)
    again.set_state({"episodes": 1, "window": [10.0]}, env_steps=150)
    again.add_episodes([30.0], [30], env_steps=150, wall_s=1.5)
    again.close()
    rows = (tmp_path / "episodes.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows] == ["env_steps", "100", "150"]
