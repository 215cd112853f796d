"""End to end: the disk under a run fills up mid-run (a small tmpfs, filled by the test).
`ppomq train` names the full disk and its path in one line, exit 5, never "crashed 5
times"; nothing is corrupted, and the same command resumes once space is freed."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ppomq.core.rundir import read_csv
from tests.support import wait_until

from .cli import PPOMQ, SMALL, clean_env

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs of its own, or a skip saying why there cannot be one."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path) -> Path:
    """Write zeros until the file system says it is full."""
    filler = mount / "filler"
    chunk = bytes(1 << 20)
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def _state(run_dir: Path) -> str:
    """The run's processes and its logs' last lines, for a run that did not stop."""
    ps = subprocess.run(["ps", "-eo", "pid,ppid,stat,wchan:20,args"], capture_output=True,
                        text=True).stdout  # fmt: skip
    tails = [
        f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        for log in sorted((run_dir / "logs").glob("*.log"))
    ]
    return "\n".join([*[ln for ln in ps.splitlines() if "ppomq" in ln], *tails])


def _command(run_dir: Path) -> list[str]:
    return [*PPOMQ, "train", "--actors", "1", "--total-steps", "40000", "--run-dir",
            str(run_dir), "--eval-episodes", "0", "--checkpoint-interval-s", "0",
            *SMALL]  # fmt: skip


def test_a_full_disk_is_named_the_summary_said_and_the_same_command_resumes(small_disk):
    run_dir = small_disk / "run"
    proc = subprocess.Popen(
        _command(run_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=clean_env(), start_new_session=True,
    )  # fmt: skip
    try:
        progress = run_dir / "progress.csv"

        def running() -> None:
            assert proc.poll() is None, proc.communicate()

        wait_until(lambda: progress.exists() and len(progress.read_text().splitlines()) > 3,
                   120, "3 updates in progress.csv", check=running)  # fmt: skip
        filler = _fill(small_disk)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            state = _state(run_dir)
            raise AssertionError(f"still running 120 s after the disk filled:\n{state}") from None
    finally:
        if proc.poll() is None:
            # The whole session: children that outlive the launcher would hold its pipes.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 5, (proc.returncode, out[-2000:], err[-2000:])
    assert "Traceback" not in err and "crashed" not in out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("ppomq: error:")]
    assert len(lines) == 1, err
    assert "full" in lines[0] and str(small_disk) in lines[0], lines[0]
    # The summary: written if it fit, else the line says it could not be.
    summary = run_dir / "summary.json"
    assert summary.exists() or "summary.json could not be written" in lines[0], lines[0]

    filler.unlink()
    again = subprocess.run(
        _command(run_dir), capture_output=True, text=True, timeout=240, env=clean_env()
    )
    assert again.returncode == 0, again.stderr[-2000:]
    doc = json.loads(summary.read_text())
    episodes = read_csv(run_dir / "episodes.csv")
    assert doc["total_env_steps"] >= 40_000
    assert doc["episodes"] == len(episodes)
    assert read_csv(run_dir / "progress.csv")[-1]["env_steps"] == doc["total_env_steps"]
