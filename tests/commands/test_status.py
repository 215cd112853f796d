"""`ppomq status` against a real redis-server holding what a learner writes.

The learner's `actors` hash keeps a field for every actor id it ever heard from (an id is
one process incarnation), so status must tell live actors from dead ones by `last_seen`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import redis

from ppomq.commands.status import actor_cells, read_status
from ppomq.core.store.keys import RunKeys

RUN = "status-test"


def _learner_wrote(client: redis.Redis, *, actors: dict[str, float], version: int = 40) -> None:
    """What LearnerLoop.write_status stores: `stats`, and one `actors` field per id with
    the Unix time its last batch arrived (`actors`: id -> seconds ago)."""
    keys = RunKeys(RUN)
    now = time.time()
    client.set(
        keys.stats,
        json.dumps({
            "version": version, "env_steps": 12_800, "wall_s": 30.0, "sps": 426.7,
            "mean_return_20": 55.0, "episodes": 200, "batches_accepted": 100,
            "rejects": {"stale": 3}, "mode": "async", "max_staleness": 2, "updated_at": now,
        }),
    )  # fmt: skip
    client.hset(
        keys.actors,
        mapping={
            actor_id: json.dumps({
                "last_seen": now - ago, "policy_version": version - 1, "age": 1,
                "batches": 50, "env_steps": 6_400,
            })
            for actor_id, ago in actors.items()
        },
    )  # fmt: skip


def _status(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "ppomq.cli", "status", "--redis-url", redis_url,
         "--run-id", RUN, *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


# A restarted actor 0: its dead incarnation (heard from 5 minutes ago), its new one, and
# actor 1, alive all along.
ACTORS = {"a0-111-aaaaaa": 300.0, "a0-222-bbbbbb": 0.5, "a1-333-cccccc": 1.5}


def test_actors_not_heard_from_are_hidden_and_counted(redis_client, redis_url):
    _learner_wrote(redis_client, actors=ACTORS)
    out = _status(redis_url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    table = "\n".join(lines)
    assert "a0-111-aaaaaa" not in table  # the dead incarnation
    assert "a0-222-bbbbbb" in table and "a1-333-cccccc" in table
    assert "3 actor(s) tracked, 2 live, 2 shown" in lines
    assert "1 actor(s) not heard from for > 60 s hidden (--forget-after-s 0 lists them)" in lines
    # The restarted actor is listed first: it sent most recently.
    rows = [ln.split()[0] for ln in lines if ln[:1] == "a" and ln[2:3] == "-"]
    assert rows == ["a0-222-bbbbbb", "a1-333-cccccc"]


def test_forget_after_s_sets_the_threshold_and_zero_lists_everyone(redis_client, redis_url):
    # Ages far from the threshold on both sides: the command's own start-up (a second on a
    # loaded machine) must not move an actor across it.
    _learner_wrote(redis_client, actors={"a0-111-aaaaaa": 900.0, "a0-222-bbbbbb": 0.5,
                                         "a1-333-cccccc": 200.0})  # fmt: skip
    out = _status(redis_url, "--forget-after-s", "100")
    assert out.returncode == 0, out.stderr
    assert "3 actor(s) tracked, 1 live, 1 shown" in out.stdout
    assert "2 actor(s) not heard from for > 100 s hidden" in out.stdout
    out = _status(redis_url, "--forget-after-s", "0")
    assert out.returncode == 0, out.stderr
    assert "3 actor(s) tracked, 3 live, 3 shown" in out.stdout
    assert "hidden" not in out.stdout
    assert "a0-111-aaaaaa" in out.stdout
    bad = _status(redis_url, "--forget-after-s", "-1")
    assert bad.returncode == 2 and "--forget-after-s" in bad.stderr


def test_json_puts_hidden_actors_under_their_own_key(redis_client, redis_url):
    _learner_wrote(redis_client, actors=ACTORS)
    out = _status(redis_url, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [a["actor_id"] for a in doc["actors"]] == ["a0-222-bbbbbb", "a1-333-cccccc"]
    assert [a["actor_id"] for a in doc["hidden_actors"]] == ["a0-111-aaaaaa"]
    assert doc["hidden_actors"][0]["last_seen_s_ago"] >= 300
    assert doc["forget_after_s"] == 60
    assert doc["actors"][0]["policy_age"] == 1


def test_an_unreadable_actor_field_does_not_hide_the_others(redis_client):
    _learner_wrote(redis_client, actors={"a1-333-cccccc": 1.0})
    keys = RunKeys(RUN)
    redis_client.hset(keys.actors, "a9-1-zzzzzz", b"not json")
    redis_client.hset(keys.actors, "a8-1-yyyyyy", json.dumps({"last_seen": time.time()}))
    status = read_status(redis_client, RUN)
    assert [a["actor_id"] for a in status["actors"]] == ["a1-333-cccccc"]
    assert status["unreadable_actors"] == ["a8-1-yyyyyy", "a9-1-zzzzzz"]


def test_a_finished_runs_actors_are_aged_from_its_last_update_not_from_now(redis_client):
    # What `ppomq status --run-dir` reads of a run that ended an hour ago: the actors that
    # trained until its end, not an empty table of actors "not heard from for 3600 s".
    _learner_wrote(redis_client, actors={"a0-222-bbbbbb": 0.5, "a1-333-cccccc": 1.5})
    keys = RunKeys(RUN)
    stats = json.loads(redis_client.get(keys.stats))
    hour = 3600.0
    stats["updated_at"] -= hour
    redis_client.set(keys.stats, json.dumps(stats))
    for actor_id, doc in redis_client.hgetall(keys.actors).items():
        aged = json.loads(doc)
        aged["last_seen"] -= hour
        redis_client.hset(keys.actors, actor_id, json.dumps(aged))
    assert read_status(redis_client, RUN)["actors"] == []  # from now: all long gone
    at_end = read_status(redis_client, RUN, as_of_last_update=True)
    assert [a["actor_id"] for a in at_end["actors"]] == ["a0-222-bbbbbb", "a1-333-cccccc"]
    assert at_end["actors"][0]["last_seen_s_ago"] == 0.5
    assert at_end["status_age_s"] >= hour
    # The table says when, from now: "0.5 s" read as "just now" of a run an hour over.
    cells = actor_cells(at_end["actors"], time.time())
    assert [row[1] for row in cells] == ["1.0 h ago", "1.0 h ago"]


def test_a_thousand_tracked_ids_are_summarised_not_listed(redis_client, redis_url):
    """Made-up ids can fill the learner's --max-actors (1024): the table shows the --top
    most recent (the actor trained on first) under one line of counts; --all lists all."""
    fakes = {f"made-up-{i:04d}": 1.0 + i / 100 for i in range(1023)}
    _learner_wrote(redis_client, actors={**fakes, "a0-222-bbbbbb": 5.0})
    keys = RunKeys(RUN)
    stats = json.loads(redis_client.get(keys.stats))
    stats["live_actors"] = 1  # the learner's count: made-up ids are never live there
    redis_client.set(keys.stats, json.dumps(stats))
    honest = json.loads(redis_client.hget(keys.actors, "a0-222-bbbbbb"))
    honest["ledger"] = {"sent": 50, "received": 50, "accepted": 50}
    redis_client.hset(keys.actors, "a0-222-bbbbbb", json.dumps(honest))

    out = _status(redis_url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "1,024 actor(s) tracked, 1 live, 20 shown" in lines
    assert "1,004 more heard from within 60 s not shown (--top N, --all)" in lines
    rows = [ln.split()[0] for ln in lines if ln.startswith(("a0-", "made-up-"))]
    # The actor trained on first, though 20 made-up ids were heard from since.
    assert rows == ["a0-222-bbbbbb", *[f"made-up-{i:04d}" for i in range(19)]]
    assert len(lines) < 40

    out = _status(redis_url, "--top", "3")
    assert out.returncode == 0, out.stderr
    assert "1,024 actor(s) tracked, 1 live, 3 shown" in out.stdout.splitlines()
    out = _status(redis_url, "--all")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "1,024 actor(s) tracked, 1 live, 1,024 shown" in lines
    assert len([ln for ln in lines if ln.startswith(("a0-", "made-up-"))]) == 1024
    bad = _status(redis_url, "--top", "-1")
    assert bad.returncode == 2 and "--top" in bad.stderr


def _default_redis_answers() -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


def test_told_no_run_and_finding_none_is_one_line_naming_both_ways(tmp_path):
    if _default_redis_answers():
        pytest.skip("a Redis answers at the default 127.0.0.1:6379: that is a run to read")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    (tmp_path / "runs" / "compare-a-vs-b").mkdir(parents=True)  # no run dir: no settings.json
    for command in (["status"], ["status", "--json"], ["weights", "list"]):
        out = subprocess.run([sys.executable, "-m", "ppomq.cli", *command], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
        assert out.returncode == 3, (command, out.stdout, out.stderr)
        assert out.stdout == ""
        [line] = out.stderr.splitlines()
        assert line.startswith("ppomq: error: no run found"), line
        assert line.endswith("pass --run-dir RUN_DIR or --redis-url URL"), line


def test_the_status_line_names_a_learner_group_and_only_a_group():
    from ppomq.commands.status import learners_words

    assert learners_words({"learners": 3}) == "a group of 3 learners, "
    assert learners_words({"learners": 1}) == ""
    assert learners_words({}) == ""  # a status written before learner groups
