"""What the launcher tells each child: its settings (as `PPOMQ_*` variables), the
addresses to connect to, and the run dir's default name."""

from __future__ import annotations

import itertools
import os
import re
import time
from pathlib import Path
from typing import Any

from ppomq.core.rundir import RUNS_ROOT
from ppomq.core.settings import TrainSettings, settings_env

# The run id a run has when none is given: its run dir is then named for its env instead.
DEFAULT_RUN_ID = TrainSettings.model_fields["run_id"].default


def subset(settings: TrainSettings, cls: type, **overrides: Any) -> Any:
    values = {k: v for k, v in settings.model_dump().items() if k in cls.model_fields}
    values.update(overrides)
    return cls.model_validate(values)


def child_env(service_settings: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    env.update(settings_env(service_settings))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def connect_addr(bind: str) -> str:
    """Where a local peer connects to reach a socket bound at `bind`: a wildcard host
    (`*`, 0.0.0.0, ::) is not an address to connect to, so loopback stands in for it."""
    if not bind.startswith("tcp://"):
        return bind  # ipc://, inproc://: the same name on both ends
    host, _, port = bind[6:].rpartition(":")
    if host in ("*", "0.0.0.0", ""):
        return f"tcp://127.0.0.1:{port}"
    if host in ("[::]", "::", "[*]"):
        return f"tcp://[::1]:{port}"
    return bind


def port_of(bind: str) -> int | None:
    """The TCP port of an endpoint (settings.json's rollout_port/weights_port), else None."""
    port = bind.rpartition(":")[2]
    return int(port) if bind.startswith("tcp://") and port.isdigit() else None


def new_run_dir(run_id: str, env_id: str, root: Path = RUNS_ROOT) -> Path:
    """A run dir of its own, created here: named for the env (or the run id, when one was
    given) and the second it started; runs started in the same second get -2, -3, ..."""
    name = _slug(env_id) if run_id == DEFAULT_RUN_ID else _slug(run_id)
    stem = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    root.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        path = root / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()  # exclusive: exactly one caller creates it
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def _slug(text: str) -> str:
    """`ALE/Pong-v5` -> `ale-pong-v5`: a file name that says what it is."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "run"
