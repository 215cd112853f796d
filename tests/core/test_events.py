"""ppomq.core.events: a run's event stream, written by several processes, read whole."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from ppomq.core.events import (
    MAX_LINE_BYTES,
    SCHEMA,
    EventWriter,
    events_writer,
    read_events,
    schema_markdown,
)
from ppomq.core.settings import ActorSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "events.md"


def test_an_event_is_one_line_with_its_time_name_source_and_fields(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    w = EventWriter(path, "learner")
    w.emit("learner.ready", t=12.5, version=3, env_steps=1024)
    w.emit("actor.first_step", actor_id="a0-1-abc")
    w.close()
    first, second = read_events(path)
    assert first == {"t": 12.5, "event": "learner.ready", "source": "learner", "version": 3,
                     "env_steps": 1024}  # fmt: skip
    assert second["event"] == "actor.first_step" and second["t"] > 12.5
    assert path.read_text().count("\n") == 2


@pytest.mark.parametrize(
    ("event", "fields"),
    [
        ("learner.started", {}),  # not in the schema
        ("actor.first_step", {}),  # a field missing
        ("actor.first_step", {"actor_id": "a", "extra": 1}),  # one too many
        ("learner.ready", {"version": "3", "env_steps": 0}),  # a str for an int
        ("learner.ready", {"version": True, "env_steps": 0}),  # a bool is no int here
        ("learner.stop", {"version": 1, "env_steps": 1, "finished": 1, "last_update_t": 1.0}),
    ],
)
def test_an_event_outside_the_schema_is_refused_with_or_without_a_file(
    tmp_path: Path, event: str, fields: dict
):
    for w in (EventWriter(tmp_path / "events.jsonl", "x"), EventWriter(None, "x")):
        with pytest.raises(ValueError):
            w.emit(event, **fields)
    assert read_events(tmp_path / "events.jsonl") == []


def test_a_line_too_long_to_append_whole_is_refused(tmp_path: Path):
    w = EventWriter(tmp_path / "events.jsonl", "actor-0")
    with pytest.raises(ValueError, match="bytes"):
        w.emit("actor.first_step", actor_id="a" * MAX_LINE_BYTES)


def test_without_a_file_nothing_is_written(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = events_writer(ActorSettings(), "actor-0")  # events_file empty: compose, k8s
    assert not w.enabled
    w.emit("actor.first_step", actor_id="a")
    assert list(tmp_path.iterdir()) == []


def test_the_setting_names_the_file(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    w = events_writer(ActorSettings(events_file=str(path)), "actor-1")
    w.emit("actor.first_step", actor_id="a1")
    assert [e["source"] for e in read_events(path)] == ["actor-1"]


def test_an_unwritable_file_loses_events_never_the_process(tmp_path: Path):
    w = EventWriter(tmp_path / "no-such-dir" / "events.jsonl", "launcher")
    assert not w.enabled
    w.emit("launcher.phase", phase="stop")


def test_a_torn_last_line_is_skipped_and_the_next_writer_starts_a_line_of_its_own(
    tmp_path: Path,
):
    path = tmp_path / "events.jsonl"
    EventWriter(path, "launcher").emit("launcher.phase", t=1.0, phase="command start")
    with open(path, "a") as fh:
        fh.write('{"t": 2.0, "event": "launcher.phase", "source": "launcher", "pha')  # killed
    assert [e["t"] for e in read_events(path)] == [1.0]
    EventWriter(path, "launcher").emit("launcher.phase", t=3.0, phase="stop")
    assert [e["t"] for e in read_events(path)] == [1.0, 3.0]


def test_a_line_a_live_writer_is_still_writing_is_not_taken_for_a_torn_one(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    # A live writer mid-line: its shared lock held, half its line in the file.
    live = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    fcntl.flock(live, fcntl.LOCK_SH)
    os.write(live, b'{"t": 1.0, "event": "launcher.phase", "source": "launcher", ')
    opened = threading.Event()
    thread = threading.Thread(
        target=lambda: (
            EventWriter(path, "actor-0").emit("launcher.phase", phase="b"),
            opened.set(),
        )
    )
    thread.start()
    assert not opened.wait(0.3)  # the new writer waits for the line to end
    os.write(live, b'"phase": "a"}\n')
    fcntl.flock(live, fcntl.LOCK_UN)
    os.close(live)
    thread.join(10)
    assert [e["phase"] for e in read_events(path)] == ["a", "b"]
    assert path.read_text().count("\n") == 2  # no stray line ending


def test_lines_that_are_not_events_are_skipped(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_text(
        '[1, 2]\n{"event": "x"}\n{"t": 1, "event": 5}\nnot json\n{"t": 4, "event": "y"}\n'
    )
    assert read_events(path) == [{"t": 4, "event": "y"}]
    assert read_events(tmp_path / "missing.jsonl") == []


def test_reading_from_an_offset_sees_only_later_events(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    w = EventWriter(path, "launcher")
    w.emit("launcher.phase", phase="exit")
    offset = path.stat().st_size
    w.emit("launcher.phase", phase="command start")
    assert [e["phase"] for e in read_events(path, offset=offset)] == ["command start"]


def _emit_many(path: str, source: str, n: int) -> None:
    w = EventWriter(path, source)
    for i in range(n):
        w.emit("actor.stop", actor_id=f"{source}-{i}", batches=i, finished=False,
               seconds={"sample": 1.0, "weights": 2.0, "send": 3.0, "pad": "x" * 2000})  # fmt: skip
    w.close()


def test_processes_appending_together_never_interleave_their_lines(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_emit_many, args=(str(path), f"actor-{i}", 300)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    events = read_events(path)
    assert len(events) == 4 * 300 == path.read_text().count("\n")
    for i in range(4):
        mine = [e["batches"] for e in events if e["source"] == f"actor-{i}"]
        assert mine == list(range(300))  # each writer's own order kept


def test_docs_events_md_holds_the_schema_table():
    assert schema_markdown() in DOC.read_text(), "run: python -m ppomq.core.events"
    for name in SCHEMA:
        assert f"`{name}`" in schema_markdown()
