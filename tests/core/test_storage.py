"""A full or read-only disk is recognised wherever it surfaces, and said in one line."""

from __future__ import annotations

import errno

import redis

from ppomq.core.errors import StorageFullError
from ppomq.core.storage import storage_error


def test_a_full_disk_names_the_file_and_how_to_resume(tmp_path):
    exc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "episodes.csv"))
    full = storage_error(exc, run_dir=tmp_path)
    assert isinstance(full, StorageFullError) and full.exit_code == 5
    text = str(full)
    assert "\n" not in text and str(tmp_path / "episodes.csv") in text
    assert "disk is full" in text and "bytes free" in text and "run the same command" in text


def test_a_read_only_run_dir_is_named_as_such(tmp_path):
    full = storage_error(OSError(errno.EROFS, "Read-only file system", "x"), run_dir=tmp_path)
    assert full is not None and "read-only" in str(full)


def test_redis_refusing_writes_it_cannot_persist_is_a_full_disk(tmp_path):
    exc = redis.ResponseError(
        "Command # 1 (SET k v) of pipeline caused error: MISCONF Errors writing to the AOF "
        "file: No space left on device"
    )
    full = storage_error(exc, run_dir=tmp_path)
    assert full is not None and str(full).startswith("Redis cannot persist")
    assert "MISCONF Errors writing to the AOF file" in str(full)


def test_other_errors_are_not_taken_for_a_full_disk(tmp_path):
    assert storage_error(OSError(errno.EIO, "I/O error"), run_dir=tmp_path) is None
    assert storage_error(redis.ResponseError("WRONGTYPE"), run_dir=tmp_path) is None
    assert storage_error(ValueError("no"), run_dir=tmp_path) is None
