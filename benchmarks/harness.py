"""What every benchmark shares: the machine it ran on, the lock, interleaved rounds, and
the result writers.

- `machine()`: CPU model and count, platform, Python, torch and the git commit, so that a
  result file says where its figures come from; `load1()`/`loadavg()` for the machine's
  load around a measurement (the CPUs are shared with other work).
- `BenchLock`: an exclusive flock on a file every measured run on this machine takes
  (`/tmp/ppomq-bench.lock` by convention), so that measured runs never overlap.
- `interleave()`: every contender once per round, in an order that changes round by
  round, so that all see the same machine; `spread()` and `median()` sum the runs up.
- `run_command()`: one command in its own session, timed, its whole process group killed
  on a timeout or Ctrl-C.
- `Run` (benchmarks/record.py): started at the top of a benchmark's `main()`; every result
  file goes through `write_json()`/`write_results()` with it, which add its record.
- `write_json()`, `write_markdown()`, `write_results()` and `pyplot()`/`save_figure()`.

Standard library only at import: the contender runners import it from other venvs.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import random
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.record import (
    Run,
    command_line,
    commit,
    cpu_model,
    loadavg,
    package_version,
    stamp,
    tree_clean,
    utc_now,
    venv_package_version,
)

__all__ = ["Run", "command_line", "cpu_model", "loadavg", "package_version", "utc_now",
           "venv_package_version"]  # fmt: skip

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
LOCK_PATH = "/tmp/ppomq-bench.lock"

K = TypeVar("K")
T = TypeVar("T")


# --- where the figures come from -------------------------------------------------------


def load1() -> float:
    """The 1-minute load average, rounded."""
    return round(os.getloadavg()[0], 2)


def git_commit() -> str | None:
    """HEAD's short hash, with "+dirty" when the working tree differs from it (the record
    keeps the two apart: `commit` and `tree_clean`)."""
    head = commit()
    return None if head is None else head + ("" if tree_clean() else "+dirty")


def machine(**extra: Any) -> dict[str, Any]:
    """The machine and software a result was measured on; `extra` adds benchmark-specific
    entries (torch threads, library versions)."""
    return {
        "cpu_model": cpu_model(),
        "cpus": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "git_commit": git_commit(),
        **extra,
    }


def machine_line(m: Mapping[str, Any]) -> str:
    """`machine()` as a phrase for a report's first paragraph."""
    parts = [f"{m['cpus']} CPUs ({m['cpu_model']}, {m['platform']})", f"python {m['python']}"]
    if m.get("torch"):
        parts.append(f"torch {m['torch']}")
    if m.get("git_commit"):
        parts.append(f"commit {m['git_commit']}")
    return ", ".join(parts)


# --- the lock --------------------------------------------------------------------------


def add_lock_option(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    parser.add_argument(
        "--lock", default=default,
        help=f"flock this file around each measured run ({LOCK_PATH} by convention; "
        "'' for none)",
    )  # fmt: skip


class BenchLock:
    """An exclusive flock on `path` (None or '': no lock) while the block runs; notes how
    long it waited for other measured runs."""

    def __init__(self, path: str | None = LOCK_PATH) -> None:
        self.path = path or None
        self.waited_s = 0.0
        self._fh: Any = None

    def __enter__(self) -> BenchLock:
        if self.path:
            t0 = time.monotonic()
            self._fh = open(self.path, "a")  # closed in __exit__
            fcntl.flock(self._fh, fcntl.LOCK_EX)
            self.waited_s = round(time.monotonic() - t0, 3)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


# --- contenders, interleaved -----------------------------------------------------------


def round_order(items: Sequence[K], round_index: int, order: str = "rotate") -> list[K]:
    """The contenders' order in one round: "rotate" (A B C, B C A, ...), "reverse" (every
    other round backwards), "shuffle" (fresh random order) or "fixed"."""
    items = list(items)
    if order == "rotate" and items:
        shift = round_index % len(items)
        return items[shift:] + items[:shift]
    if order == "reverse":
        return items[::-1] if round_index % 2 else items
    if order == "shuffle":
        random.shuffle(items)
        return items
    if order == "fixed":
        return items
    raise ValueError(f"unknown order {order!r}")


def interleave(
    contenders: Sequence[K],
    rounds: int,
    run: Callable[[K, int], T],
    *,
    order: str = "rotate",
    lock: str | None = None,
    on_result: Callable[[K, int, T], None] | None = None,
) -> dict[K, list[T]]:
    """`run(contender, round)` for every contender once per round, each under the lock;
    the per-run figures by contender, in round order."""
    out: dict[K, list[T]] = {c: [] for c in contenders}
    for r in range(rounds):
        for c in round_order(contenders, r, order):
            with BenchLock(lock):
                result = run(c, r)
            out[c].append(result)
            if on_result is not None:
                on_result(c, r, result)
    return out


def median(values: Iterable[float | None], digits: int | None = None) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    m = statistics.median(vals)
    return m if digits is None else round(m, digits)


def spread(values: Sequence[float], digits: int | None = None) -> dict[str, float]:
    """Median, min and max of one contender's per-run figures."""
    r = (lambda x: x) if digits is None else (lambda x: round(x, digits))
    return {"median": r(statistics.median(values)), "min": r(min(values)), "max": r(max(values))}


# --- one command -----------------------------------------------------------------------


def ppomq_argv(*args: str) -> list[str]:
    """`ppomq ARGS` with this interpreter's ppomq: the venv's script, else `-m ppomq.cli`."""
    exe = Path(sys.executable).parent / "ppomq"
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "ppomq.cli"]
    return [*head, *args]


def run_command(
    argv: Sequence[str],
    log_dir: Path,
    timeout_s: float,
    *,
    cwd: Path = REPO,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Start `argv` in its own session, its output in log_dir/stdout.txt and stderr.txt,
    and wait for it; on a timeout or Ctrl-C its whole process group goes (a trainer's
    services with it). Returns the command, Unix start time `t_cmd`, `command_s`,
    `exit_code`, `error` (None when it exited 0) and the load average around it."""
    out: dict[str, Any] = {"command": shlex.join(argv), "load_before": loadavg(), "error": None}
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    with open(log_dir / "stdout.txt", "wb") as so, open(log_dir / "stderr.txt", "wb") as se:
        t_cmd = time.time()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=so, stderr=se, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)  # fmt: skip
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            out["error"] = f"timed out after {timeout_s:.0f} s"
        except BaseException:  # Ctrl-C: no orphaned processes
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        t_exit = time.time()
    out.update(t_cmd=t_cmd, exit_code=code, command_s=round(t_exit - t_cmd, 3),
               load_after=loadavg())  # fmt: skip
    if code != 0 and out["error"] is None:
        tail = (log_dir / "stderr.txt").read_text(errors="replace")[-600:].strip()
        out["error"] = f"exit {code}: {tail}"
    return out


# --- writers ---------------------------------------------------------------------------


def write_json(path: Path, doc: Mapping[str, Any], run: Run) -> None:
    """A result file: the figures in `doc` with `run`'s record under "run" (see
    benchmarks/record.py). Whole or not at all: an interrupted write leaves the previous
    file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(stamp(doc, run), indent=2) + "\n")
    os.replace(tmp, path)


def write_markdown(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = text if text.endswith("\n") else text + "\n"
    path.write_text(text)
    return text


def write_results(out: Path, stem: str, doc: Mapping[str, Any], markdown: str, run: Run) -> str:
    """OUT/STEM.json (the record, `write_json`) and OUT/STEM.md; returns the Markdown."""
    write_json(out / f"{stem}.json", doc, run)
    return write_markdown(out / f"{stem}.md", markdown)


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (benchmarks run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int = 100) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
