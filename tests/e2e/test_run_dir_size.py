"""End to end: a finished `ppomq train` run dir is as big as what it keeps, not as its
history: the embedded Redis's append-only file holds the live keys (the kept weight
versions and the run's status), not every version ever published, and the checkpoints
are the current one and the one before it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import redis

from ppomq.core.rundir import REDIS_DIR
from ppomq.core.store.run_redis import serve_copy

from .cli import PPOMQ, SMALL, clean_env

pytestmark = pytest.mark.slow

KEEP = 3
# What the compacted file may hold beyond the live keys' own serialized size: the RDB
# preamble's header and per-key framing, and the few writes after the rewrite.
SLACK_BYTES = 16 << 10


def _live_bytes(data_dir: Path) -> tuple[int, int]:
    """(number of keys, their DUMP sizes summed): what a compacted file must hold."""
    with serve_copy(data_dir) as url:
        client = redis.Redis.from_url(url)
        try:
            keys = list(client.scan_iter(count=1000))
            return len(keys), sum(len(client.dump(k) or b"") for k in keys)
        finally:
            client.close()


def test_the_aof_holds_what_is_live_and_two_checkpoints_remain(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [*PPOMQ, "train", "--actors", "2", "--total-steps", "6000", "--keep-versions", str(KEEP),
         "--run-dir", str(run_dir), *SMALL],
        capture_output=True, text=True, timeout=240, env=clean_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    versions = json.loads((run_dir / "summary.json").read_text())["versions"]
    # Many more versions published than kept: an uncompacted file holds all of them.
    assert versions >= 5 * KEEP, versions
    data_dir = run_dir / REDIS_DIR
    on_disk = sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file())
    keys, live = _live_bytes(data_dir)
    assert keys > KEEP  # the kept versions and the run's other keys
    assert on_disk <= 1.25 * live + SLACK_BYTES, (on_disk, live, versions)
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["ckpt.prev.pt", "ckpt.pt"], checkpoints
