"""Run dirs: each run gets one of its own, named for what it trains, and a run dir in use
is refused rather than shared (two runs in one dir corrupt each other's records)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ppomq.core.errors import UsageError
from ppomq.core.run_lock import RunDirLock
from ppomq.launch.wiring import new_run_dir


def test_runs_started_in_the_same_second_get_run_dirs_of_their_own(tmp_path: Path) -> None:
    made = [new_run_dir("default", "CartPole-v1", root=tmp_path) for _ in range(3)]
    assert len(set(made)) == 3 and all(p.is_dir() for p in made)
    assert made[1].name.startswith(made[0].name)  # the same second: -2, -3 on the first


def test_a_run_dir_is_named_for_its_env_or_the_run_id_given(tmp_path: Path) -> None:
    assert new_run_dir("default", "ALE/Pong-v5", root=tmp_path).name.startswith("ale-pong-v5-")
    assert new_run_dir("seed3", "CartPole-v1", root=tmp_path).name.startswith("seed3-")


HOLDER = """
import sys
from pathlib import Path
from ppomq.core.run_lock import RunDirLock
lock = RunDirLock(Path(sys.argv[1]), holder="test")
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_a_run_dir_in_use_is_refused_in_one_line_naming_the_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(UsageError) as refused:
            RunDirLock(tmp_path, holder="second")
        text = str(refused.value)
        assert f"pid {holder.pid}" in text and "--run-dir" in text and "\n" not in text
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    # The holder is gone, and its lock with it: no stale lock to clean up by hand.
    RunDirLock(tmp_path, holder="third").release()


def test_another_env_in_a_run_dir_is_refused_in_one_line_and_changes_nothing(tmp_path: Path):
    from ppomq.core.settings import TrainSettings, load_settings
    from ppomq.launch.supervisor import Launcher

    (tmp_path / "settings.json").write_text(json.dumps({"env_id": "CartPole-v1"}))
    before = sorted(p.name for p in tmp_path.iterdir())
    settings = load_settings(TrainSettings, {"env_id": "Pendulum-v1", "run_dir": str(tmp_path)})
    with pytest.raises(UsageError) as refused:
        Launcher(settings)
    text = str(refused.value)
    assert "holds a run of CartPole-v1, not Pendulum-v1" in text and "\n" not in text
    assert "--env-id CartPole-v1" in text
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".lock") == before
    RunDirLock(tmp_path, holder="after").release()  # the refused launch let go of it


def test_a_released_lock_leaves_no_file_and_the_dir_can_be_locked_again(tmp_path: Path) -> None:
    lock = RunDirLock(tmp_path, holder="first")
    assert (tmp_path / ".lock").exists()
    lock.release()
    assert not (tmp_path / ".lock").exists()  # a run dir at rest holds only the run
    RunDirLock(tmp_path, holder="second").release()


def test_a_lock_taken_on_a_file_its_holder_removed_is_taken_again_on_the_new_file(
    tmp_path: Path,
) -> None:
    """The race of removing the file: a second process opened the old file before the
    first released it, and locks it after. That lock guards nothing: it must take the file
    at the path instead, or two runs would each hold "the" lock."""
    import os

    first = RunDirLock(tmp_path, holder="first")
    stale = os.open(tmp_path / ".lock", os.O_RDWR)  # opened before the release
    first.release()
    third = RunDirLock(tmp_path, holder="third")  # made and locked the new file
    try:
        import fcntl

        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old inode: free to lock
        assert not third._same_file(stale)
        with pytest.raises(UsageError):
            RunDirLock(tmp_path, holder="fourth")  # the path's file is still held
    finally:
        os.close(stale)
        third.release()
