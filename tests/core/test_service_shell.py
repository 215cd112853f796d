"""service_shell: what every service does the same way at start and stop."""

from __future__ import annotations

import logging
import signal
import socket

import pytest

from ppomq.core.errors import UsageError
from ppomq.core.service_shell import service_shell
from ppomq.core.store.embedded import free_port


def test_a_taken_metrics_port_is_a_one_line_usage_error(restore_handlers):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with (
            pytest.raises(UsageError, match=f"{port}.*--metrics-port"),
            service_shell("svc", metrics_port=port, unit_of_work="x"),
        ):
            pass


def test_a_second_signal_ends_the_body_after_its_cleanup_and_says_how(restore_handlers, caplog):
    caplog.set_level(logging.INFO)
    cleaned = []
    on_stop = []
    with service_shell(
        "svc", metrics_port=free_port(), unit_of_work="x", on_stop=lambda: on_stop.append(1)
    ) as stop:
        try:
            signal.raise_signal(signal.SIGTERM)  # its handler has run when this returns
            assert stop.requested and on_stop == [1]
            signal.raise_signal(signal.SIGTERM)  # FastStop, raised by the handler
            raise AssertionError("the second signal did not stop the body")
        finally:
            cleaned.append(1)
    assert cleaned == [1]
    assert "svc stopped (fast stop)" in caplog.text


FINISHING_SERVICE = """
import os, signal, sys
from ppomq.core.store.embedded import free_port
from ppomq.core.service_shell import service_shell
with service_shell("svc", metrics_port=free_port(), unit_of_work="x") as stop:
    pass  # the run finished
code = stop.exit_code(finished=True)
# What a pod deleted just as its run finishes sends, while the process is exiting.
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGINT)
sys.exit(code)
"""


def test_a_stop_signal_after_the_shell_cannot_change_the_exit_code(tmp_path):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", FINISHING_SERVICE], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "received" not in res.stderr  # not even taken for a stop request
