"""The end of `ppomq train` says how big the run dir is, what takes the room, and the
setting that bounds the biggest part."""

from __future__ import annotations

from pathlib import Path

from ppomq.launch.run_size import run_dir_size_line, tree_bytes


def test_the_size_line_counts_the_whole_dir_and_names_its_big_parts(tmp_path: Path):
    (tmp_path / "redis").mkdir()
    (tmp_path / "redis" / "appendonly.aof").write_bytes(b"x" * 3_000_000)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt.pt").write_bytes(b"x" * 1_000_000)
    (tmp_path / "progress.csv").write_bytes(b"x" * 500_000)
    assert tree_bytes(tmp_path) == 4_500_000
    line = run_dir_size_line(tmp_path, keep_versions=20)
    assert "run dir size: 4.5 MB" in line
    assert "weight versions in Redis 3.0 MB" in line and "checkpoints 1.0 MB" in line
    assert "newest 20 versions" in line and "--keep-versions" in line
