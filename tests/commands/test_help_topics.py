"""`ppomq train --help` (and every service command's) shows its settings by topic, the
common ones first: each flag once, the env id near the top."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ppomq.core.settings import (
    ActorSettings,
    LearnerSettings,
    TrainSettings,
    WeightserverSettings,
)
from ppomq.core.settings.layering import setting_names
from ppomq.core.settings.topics import TOPICS, settings_by_topic

COMMANDS = {
    "train": TrainSettings,
    "learner": LearnerSettings,
    "actor": ActorSettings,
    "weightserver": WeightserverSettings,
}


def _help(command: str) -> list[str]:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}  # a newcomer's terminal
    out = subprocess.run([sys.executable, "-m", "ppomq.cli", command, "--help"],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _entries(lines: list[str]) -> list[str]:
    """The flag each option entry documents, in the order `--help` lists them."""
    entry = re.compile(r"  (?:-[a-z], )?(--[a-z0-9-]+)(?:[ ,]|$)")
    return [m.group(1) for line in lines if (m := entry.match(line))]


def test_train_help_shows_the_env_id_and_the_common_settings_first():
    lines = _help("train")
    env_line = next(i for i, line in enumerate(lines) if line.startswith("  --env-id "))
    assert env_line < 30, "\n".join(lines[: env_line + 1])
    headings = [line[:-1] for line in lines if re.fullmatch(r"[A-Za-z][^:]*:", line)]
    assert headings[:2] == ["options", "common settings"], headings
    assert headings[1:] == [t.title for t in TOPICS], headings
    entries = _entries(lines)
    assert entries[:2] == ["--help", "--config"], entries
    assert entries[2:6] == ["--env-id", "--preset", "--total-steps", "--duration-s"], entries


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_setting_has_exactly_one_entry_and_the_usage_lists_none(command):
    lines = _help(command)
    entries = _entries(lines)
    for name in COMMANDS[command].model_fields:
        assert entries.count(_flag(name)) == 1, (command, name)
    assert len(entries) == len(set(entries)), [e for e in entries if entries.count(e) > 1]
    usage = lines[: lines.index("")]
    assert len(usage) == 1, usage  # not every flag again, in forty lines


def test_each_command_shows_every_setting_under_one_topic_in_topic_order():
    order = [t.title for t in TOPICS]
    for cls in COMMANDS.values():
        grouped = settings_by_topic(cls)
        shown = [name for _, names in grouped for name in names]
        assert sorted(shown) == sorted(cls.model_fields), cls.__name__
        titles = [t.title for t, _ in grouped]
        assert titles == sorted(titles, key=order.index), cls.__name__


def test_a_topic_names_only_settings_that_exist():
    known = setting_names()
    for topic in TOPICS:
        assert set(topic.fields) <= known, (topic.title, set(topic.fields) - known)
