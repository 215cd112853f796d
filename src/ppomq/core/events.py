"""A run's event stream: RUN_DIR/events.jsonl, one JSON object per line, written by every
process of a `ppomq train` run (launcher, learner, actors) and read by the tools that
watch them (the launcher's timeline, `ppomq status --run-dir`, the benchmarks, the tests).
Log lines are for people; these are for programs. docs/concepts/events.md documents every event;
SCHEMA below is that document as code, and a test keeps the two the same.

Each event is {"t": Unix time, "event": "dotted.name", "source": "...", ...its fields}.
Several processes append to one file: each line goes out in one write() on a descriptor
opened O_APPEND and is kept under MAX_LINE_BYTES, so lines never interleave. A writer
killed mid-line leaves a torn last line; the reader skips any line that is not whole, and
the next writer to open the file ends it. Writers hold a shared flock while they write and
that check holds it exclusively: a line still being copied in by a live writer also ends
without its newline for a moment, and must not be taken for a torn one.

A process is told where to write by its `events_file` setting (PPOMQ_EVENTS_FILE), which
`ppomq train` sets for its children; empty (compose, Kubernetes) writes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENTS_FILE = "events.jsonl"
# PIPE_BUF on Linux: the size up to which concurrent appends are safe to assume whole.
MAX_LINE_BYTES = 4096
RESERVED = ("t", "event", "source")

log = logging.getLogger("ppomq")


@dataclass(frozen=True)
class EventSpec:
    """One event: who emits it, what it means, and its fields (name -> (type, meaning)).
    Every field is always present."""

    source: str
    meaning: str
    fields: dict[str, tuple[str, str]]


SCHEMA: dict[str, EventSpec] = {
    "launcher.phase": EventSpec(
        "launcher",
        "`ppomq train` reached a phase, at `t`: command start (the process's start), "
        "launcher start, redis ready, zygote ready, children forked, stop, learner exited, "
        "NAME exited (each child), children exited, zygote stopped, redis stopped, learning "
        "curve drawn (ppomq train draws it once the learner has exited), and at "
        "the end what only the children know (learner ready, first env step, last update), "
        "then exit. "
        "A phase noted again (the learner exiting after a restart) is written again.",
        {"phase": ("str", "the phase's name")},
    ),
    "learner.ready": EventSpec(
        "learner",
        "The learner receives rollouts; its first version is published.",
        {
            "version": ("int", "the version actors can fetch"),
            "env_steps": ("int", "env steps trained on so far (a resumed run's included)"),
        },
    ),
    "learner.evaluate": EventSpec(
        "learner",
        "The learner's final greedy evaluation runs: said as it starts (`done` 0), then "
        "every few seconds until it ends, so that a watcher (the launcher) tells a long "
        "evaluation from a learner that hangs.",
        {
            "episodes": ("int", "episodes it plays (--eval-episodes)"),
            "done": ("int", "episodes finished so far"),
            "steps": ("int", "env steps taken so far"),
            "elapsed_s": ("float", "seconds it has run so far"),
            "limit_s": ("float", "its time bound (--eval-timeout-s; 0: none)"),
        },
    ),
    "learner.stop": EventSpec(
        "learner",
        "The learner is done: checkpoint, final evaluation and summary.json written.",
        {
            "version": ("int", "its last version"),
            "env_steps": ("int", "env steps trained on"),
            "finished": ("bool", "the run reached its end (not a stop signal)"),
            "last_update_t": ("float", "Unix time of its last update (its start if none)"),
        },
    ),
    "actor.first_step": EventSpec(
        "actor-INDEX",
        "An actor, weights in hand, is about to take its first env step: start-up ends here.",
        {"actor_id": ("str", "this actor process's id")},
    ),
    "actor.stop": EventSpec(
        "actor-INDEX",
        "An actor is done; where its main loop's time went.",
        {
            "actor_id": ("str", "this actor process's id"),
            "batches": ("int", "batches it sent"),
            "finished": ("bool", "it heard that the run finished (not a stop signal)"),
            "seconds": ("object", "main-loop seconds by phase: sample, weights, send"),
        },
    ),
}

_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "object": (dict,),
}


def check_event(event: str, fields: dict[str, Any]) -> None:
    """Raise ValueError unless `event` is in SCHEMA and `fields` are exactly its fields,
    each of its type."""
    spec = SCHEMA.get(event)
    if spec is None:
        raise ValueError(f"unknown event {event!r}; add it to SCHEMA and docs/concepts/events.md")
    if set(fields) != set(spec.fields):
        raise ValueError(f"{event} takes {sorted(spec.fields)}, got {sorted(fields)}")
    for name, (kind, _) in spec.fields.items():
        value = fields[name]
        # bool is an int to Python; only a "bool" field takes one.
        if isinstance(value, bool) != (kind == "bool") or not isinstance(value, _TYPES[kind]):
            raise ValueError(f"{event}.{name} must be {kind}, got {value!r}")


class EventWriter:
    """Appends one process's events to a run's event file; writes nothing without one.

    Never raises for the file's sake (a full disk, a run dir gone): events are what the
    tools read, never what a service depends on. An event not in SCHEMA does raise."""

    def __init__(self, path: Path | str | None, source: str) -> None:
        self.path = Path(path) if path else None
        self.source = source
        self._fd: int | None = None
        if self.path is None:
            return
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o644)
            self._end_torn_line()
        except OSError as exc:
            log.warning("events not written: cannot open %s (%s)", self.path, exc.strerror)
            self._fd = None

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def _end_torn_line(self) -> None:
        """A writer killed mid-line left no newline: end that line, so that ours starts on
        a line of its own rather than being lost with the torn one."""
        assert self._fd is not None and self.path is not None
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            with open(self.path, "rb") as fh:
                if fh.seek(0, os.SEEK_END) == 0:
                    return
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    os.write(self._fd, b"\n")
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def emit(self, event: str, *, t: float | None = None, **fields: Any) -> None:
        """Append `event` with `fields` (SCHEMA's), at `t` (now)."""
        check_event(event, fields)
        if self._fd is None:
            return
        doc = {"t": time.time() if t is None else t, "event": event, "source": self.source}
        line = (json.dumps({**doc, **fields}, separators=(",", ":")) + "\n").encode()
        if len(line) >= MAX_LINE_BYTES:
            raise ValueError(f"{event} is {len(line)} bytes; events stay under {MAX_LINE_BYTES}")
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                os.write(self._fd, line)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def events_writer(settings: Any, source: str) -> EventWriter:
    """The writer a service emits through: to its `events_file` setting, if set."""
    return EventWriter(getattr(settings, "events_file", "") or None, source)


def file_size(path: Path | None) -> int:
    """Where the next event will start: a reader from here sees only later events."""
    try:
        return os.path.getsize(path) if path is not None else 0
    except OSError:
        return 0


def read_events(path: Path, *, offset: int = 0) -> list[dict[str, Any]]:
    """The events in `path` from byte `offset` on, in the order written; [] without the
    file. A line that is not whole (a torn last line) or not an event (an object with a
    string `event` and a numeric `t`) is skipped."""
    return tail_events(path, offset)[0]


def tail_events(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """read_events from `offset`, and where the next read starts: after the last whole
    line (a line still being written is read whole next time)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    whole = data[: data.rfind(b"\n") + 1]
    return _parse(whole), offset + len(whole)


def _parse(data: bytes) -> list[dict[str, Any]]:
    out = []
    for raw in data.split(b"\n")[:-1]:  # what follows the last newline is not whole
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if (
            isinstance(doc, dict)
            and isinstance(doc.get("event"), str)
            and isinstance(doc.get("t"), (int, float))
        ):
            out.append(doc)
    return out


def schema_markdown() -> str:
    """SCHEMA as docs/concepts/events.md's table (`python -m ppomq.core.events` prints it)."""
    lines = ["| event | source | fields | meaning |", "|---|---|---|---|"]
    for name, spec in SCHEMA.items():
        fields = "<br>".join(f"`{f}` ({kind}): {what}" for f, (kind, what) in spec.fields.items())
        lines.append(f"| `{name}` | {spec.source} | {fields} | {spec.meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(schema_markdown(), end="")
