"""Helpers shared by the weights tests: parameter sets and a weightserver subprocess."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

import numpy as np

from ppomq.proto.weights_blob import WeightsHeader, pack_weights

MLP_SHAPES = {
    "pi.0.weight": (64, 4),
    "pi.0.bias": (64,),
    "pi.2.weight": (64, 64),
    "pi.2.bias": (64,),
    "pi.4.weight": (2, 64),
    "pi.4.bias": (2,),
}


def mlp_tensors(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in MLP_SHAPES.items()}


def make_weights(
    version: int, seed: int | None = None, tensors: Mapping[str, np.ndarray] | None = None
) -> tuple[WeightsHeader, bytes]:
    """A small MLP-shaped weights message whose values depend on `seed` (default: version)."""
    arrays = tensors if tensors is not None else mlp_tensors(version if seed is None else seed)
    return pack_weights(
        version,
        arrays,
        model={"arch": "mlp", "hidden": [64, 64]},
        learner_step=version,
        env_steps=version * 256,
    )


class WeightserverProcess:
    """`ppomq weightserver` as a real subprocess, with its log lines collected."""

    def __init__(self, redis_url: str, run_id: str, *extra: str, bind: str = "") -> None:
        args = [
            sys.executable, "-m", "ppomq.cli", "weightserver",
            "--bind", bind or "tcp://127.0.0.1:*",
            "--redis-url", redis_url,
            "--run-id", run_id,
            "--poll-interval-s", "0.2",
            *extra,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.endpoint = self.wait_for_log(r"listening on (tcp://\S+)").group(1)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))

    def wait_for_log(self, pattern: str, timeout_s: float = 20.0) -> re.Match[str]:
        """The first log line (old or new) matching `pattern`; fails after `timeout_s`."""
        regex = re.compile(pattern)
        for line in self.lines:
            if m := regex.search(line):
                return m
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None and self._queue.empty():
                    break
                continue
            self.lines.append(line)
            if m := regex.search(line):
                return m
        raise AssertionError(f"no log line matching {pattern!r}; log so far:\n" + self.log())

    def log(self) -> str:
        while not self._queue.empty():
            self.lines.append(self._queue.get_nowait())
        return "\n".join(self.lines)

    def stop(self, sig: int | None = None) -> int:
        """Send SIGTERM (or `sig`) and return the exit code."""
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                "weightserver did not exit after SIGTERM:\n" + self.log()
            ) from None
