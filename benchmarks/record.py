"""One record per benchmark run: what ran, on which tree and machine, under what load, with
which libraries, when; the figures sit beside it in the same result file.

A benchmark starts a `Run` at the top of its `main()` (the command, the date and the load
before), and every result file it writes goes through `harness.write_json()` with that run,
which adds `run.record()` under the key `"run"` (the load after, the commit, the tree's
state, the machine and the versions at the time of writing).

Standard library only at import: the contender runners import the harness from other venvs.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Every field a record carries; tests/test_headline_records.py and the writer's test hold
# each result file that a headline figure names to this list.
# ("started_utc", when the run began, is recorded too but not required: files written before
# this format and gathered from their own fields lack it.)
FIELDS = (
    "command", "commit", "tree_clean", "machine", "load_before", "load_after", "versions",
    "date_utc",
)  # fmt: skip
MACHINE_FIELDS = ("cpu_model", "cpus", "platform")
VERSION_FIELDS = ("python", "torch")


def loadavg() -> list[float]:
    """The 1, 5 and 15-minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> str | None:
    """HEAD's short hash (None outside a git checkout)."""
    return _git("rev-parse", "--short", "HEAD") or None


def tree_clean() -> bool | None:
    """Whether the tracked files are HEAD's: a figure from a changed tree is not HEAD's.
    The result files are left out: benchmarks rewrite them as they run."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":(exclude)benchmarks/results")  # fmt: skip
    return None if status is None else status == ""


def package_version(name: str) -> str | None:
    """An installed distribution's version, without importing it (torch takes seconds)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def venv_package_version(python: str | os.PathLike[str], name: str) -> str | None:
    """A distribution's version in another interpreter's environment (a peer's venv)."""
    code = f"from importlib import metadata; print(metadata.version({name!r}))"
    try:
        done = subprocess.run([os.fspath(python), "-c", code], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def machine_fields() -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "cpus": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
    }


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How the benchmark was started: `python -m benchmarks.MODULE ARGS`."""
    given = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", "-m", f"benchmarks.{module}", *given])


class Run:
    """One benchmark run, from the top of its `main()`: the command, the start and the load
    before; `peer()` adds the version of each peer library that ran."""

    def __init__(self, module: str, argv: Sequence[str] | None = None) -> None:
        self.command = command_line(module, argv)
        # The tree the benchmark's code came from, as it started: a result file it writes
        # along the way changes the tree, not the code that ran.
        self.commit = commit()
        self.tree_clean = tree_clean()
        self.started_utc = utc_now()
        self.load_before = loadavg()
        self.peers: dict[str, str | None] = {}
        self.machine_extra: dict[str, Any] = {}

    def peer(self, name: str, version: str | None) -> None:
        """A peer library that ran (its distribution name and version)."""
        self.peers[name] = version

    def record(self) -> dict[str, Any]:
        """The record as of now: a result written mid-run carries the load at that point."""
        return {
            "command": self.command,
            "commit": self.commit,
            "tree_clean": self.tree_clean,
            "machine": {**machine_fields(), **self.machine_extra},
            "load_before": self.load_before,
            "load_after": loadavg(),
            "versions": {
                "python": platform.python_version(),
                "torch": package_version("torch"),
                **self.peers,
            },
            "started_utc": self.started_utc,
            "date_utc": utc_now(),
        }


def stamp(doc: Mapping[str, Any], run: Run) -> dict[str, Any]:
    """`doc` with `run`'s record under "run". A document that gathers runs over several
    invocations (learning, variants) keeps the records of the earlier ones, each once, under
    "earlier_runs": its figures may come from any of them."""
    body = {k: v for k, v in doc.items() if k not in ("run", "earlier_runs")}
    earlier = list(doc.get("earlier_runs", []))
    previous = doc.get("run")
    if isinstance(previous, Mapping) and previous.get("started_utc") != run.started_utc:
        earlier.append(previous)
    return {"run": run.record(), **body, **({"earlier_runs": earlier} if earlier else {})}


def missing_fields(doc: Mapping[str, Any]) -> list[str]:
    """The record fields a result document lacks or leaves empty (None), as dotted names."""
    run = doc.get("run")
    if not isinstance(run, Mapping):
        return ["run"]
    missing = [f"run.{f}" for f in FIELDS if run.get(f) is None]
    for group, fields in (("machine", MACHINE_FIELDS), ("versions", VERSION_FIELDS)):
        sub = run.get(group)
        if isinstance(sub, Mapping):
            # the required ones, and any other entry left empty (a peer whose version is unknown)
            names = [*fields, *(k for k in sub if k not in fields and group == "versions")]
            missing += [f"run.{group}.{k}" for k in names if sub.get(k) is None]
    for f in ("load_before", "load_after"):
        if run.get(f) is not None and len(run[f]) != 3:
            missing.append(f"run.{f} (1, 5 and 15-minute load averages)")
    return missing
