"""A run dir's life with `ppomq train`: two runs never share one (the second is refused in
one line naming the first's pid, and the first trains on undisturbed), and a start that
fails leaves none behind."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from pathlib import Path

from tests.support.waiting import wait_until

from .cli import PPOMQ, SMALL
from .cli import clean_env as _env


def test_a_second_train_in_a_run_dir_in_use_exits_2_naming_the_pid(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        [*PPOMQ, "train", "--actors", "1", "--total-steps", "0", "--duration-s", "120",
         "--run-dir", str(run_dir), *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: (run_dir / "progress.csv").exists(), 120, "the first run training",
                   check=lambda: first.poll() is None or _fail(first))  # fmt: skip
        second = subprocess.run(
            [*PPOMQ, "train", "--actors", "1", "--run-dir", str(run_dir), *SMALL],
            capture_output=True, text=True, timeout=120, env=_env(),
        )  # fmt: skip
        assert second.returncode == 2, second.stdout + second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"in use by another run (pid {first.pid}" in lines[0], lines
        assert first.poll() is None  # undisturbed
    finally:
        first.send_signal(signal.SIGINT)
        out, _ = first.communicate(timeout=120)
    assert first.returncode == 130, out  # stopped by Ctrl-C, summary written
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] > 0
    # Started again, it says on the console that it goes on with that run, and from where.
    again = subprocess.run(
        [*PPOMQ, "train", "--actors", "1", "--total-steps", str(summary["total_env_steps"] + 512),
         "--run-dir", str(run_dir), *SMALL],
        capture_output=True, text=True, timeout=300, env=_env(),
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    said = again.stdout.splitlines()[1]
    assert said.startswith(f"resuming the run in {run_dir} from version "), again.stdout
    # Its last update's env steps: at most the summary's (batches may arrive after it).
    steps = int(re.search(r"\(([0-9,]+) env steps\)", said).group(1).replace(",", ""))
    assert 0 < steps <= summary["total_env_steps"]


def _fail(proc: subprocess.Popen) -> bool:
    raise AssertionError(f"the first run exited {proc.returncode}")


def test_a_start_that_fails_leaves_no_run_dir_behind(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on: Redis is not there
        s.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    out = subprocess.run(
        [*PPOMQ, "train", "--redis-url", url, *SMALL],
        capture_output=True, text=True, timeout=120, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 4, out.stdout + out.stderr
    assert "Redis" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not any((tmp_path / "runs").iterdir())  # the run dir it named is gone
