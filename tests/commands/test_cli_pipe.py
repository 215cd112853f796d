"""`ppomq ... | head -1`: a reader that stops early ends the command quietly, as it ends a C
tool (status 141, SIGPIPE's), never with a BrokenPipeError traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from ppomq.core.store.weight_store import WeightStore

from ..weightserver.helpers import make_weights

RUN = "pipe-run"


def _closed_pipe_run(*args: str) -> tuple[int, str]:
    """Run `ppomq ARGS` with stdout a real pipe whose read end is already closed when the
    command first writes (it is closed right after the start, long before any output)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ppomq.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.fixture
def stored(redis_client: redis.Redis) -> None:
    store = WeightStore(redis_client, RUN, keep_versions=20)
    for v in range(1, 11):
        store.publish(*make_weights(v))


@pytest.mark.parametrize("json_out", [False, True])
def test_weights_list_into_a_closed_pipe_exits_141_without_a_traceback(
    stored: None, redis_url: str, json_out: bool
) -> None:
    args = ["weights", "list", "--redis-url", redis_url, "--run-id", RUN]
    code, err = _closed_pipe_run(*args, *(["--json"] if json_out else []))
    assert code == 141, err
    assert err == ""


def test_help_into_a_closed_pipe_ends_quietly() -> None:
    code, err = _closed_pipe_run("--help")
    # argparse ends --help with SystemExit(0) before main's flush: 0 or 141, never a trace.
    assert code in (0, 141), err
    assert err == ""


def test_head_1_gets_the_first_line_and_nothing_on_stderr(stored: None, redis_url: str) -> None:
    """The shell pipeline a user types: the first line arrives, stderr stays clean."""
    cmd = (
        f"{sys.executable} -m ppomq.cli weights list --redis-url {redis_url} --run-id {RUN}"
        " | head -1"
    )
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")},
    )
    assert out.stdout.startswith(f"run {RUN}: 10 version(s)"), out.stdout
    assert out.stderr == ""
    assert out.returncode in (0, 141)  # 141 only when head had gone before the last write
