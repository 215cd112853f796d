"""`docker compose` on a real engine: the repository's docker-compose.yml and Dockerfile,
built and run as a user runs them (benchmarks/deploy/docker_engine.py says what stands in for
Docker Hub where there is none).

- `up --build` of a finite run returns 0, every ppomq service exits 0, and the summary in
  the `runs` volume is solved;
- `--scale actor=4` trains with all four; an actor killed with SIGKILL inside its
  container is restarted (`restart: on-failure`); the learner container removed mid-run and
  started again resumes from its checkpoint; the Redis container restarted mid-run keeps
  every version (the CLI's list before and after) and `latest` never goes back;
- `PPOMQ_LEARNERS=2 --profile learner-group up` trains a finite run with a learner group
  of two: both ranks join, each actor sends to its rank, both end with the same weights;
- `--profile '*' down -v` leaves no container, network or volume.

Skipped, saying why, only where no engine answers and none can be started.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.deploy.docker_engine import ComposeProject, Engine, NoEngine, start_engine
from tests.support import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

# Each poll is a `docker exec` or a `docker compose` call: once a second is plenty.
wait_slowly = functools.partial(wait_until, interval_s=1.0)

RUN_ID = "cartpole"  # docker-compose.yml's default PPOMQ_RUN_ID


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    try:
        return start_engine(tmp_path_factory.mktemp("engine"))
    except NoEngine as exc:
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture
def project(engine: Engine, tmp_path: Path) -> Iterator[ComposeProject]:
    env_file = tmp_path / "empty.env"  # no developer's .env leaks in
    env_file.write_text("")
    p = ComposeProject(engine, f"ppomq-test-{uuid.uuid4().hex[:8]}", env_file)
    try:
        yield p
    finally:
        p.run("--profile", "*", "down", "-v", "--timeout", "5", check=False, timeout=180)


def read_summary(p: ComposeProject, tmp_path: Path) -> dict:
    """summary.json from the `runs` volume, copied out of the (exited) learner container."""
    dest = tmp_path / "summary.json"
    cid = p.container_id("learner")
    p.engine.docker("cp", f"{cid}:/data/runs/{RUN_ID}/summary.json", str(dest))
    return json.loads(dest.read_text())


def exit_codes(p: ComposeProject) -> dict[str, int]:
    return {c["Name"]: int(c["ExitCode"]) for c in p.containers() if c["Service"] != "redis"}


def versions_listed(p: ComposeProject) -> list[int]:
    """`ppomq weights list --json` as a user runs it: in the weightserver's container, whose
    environment holds the read-only Redis URL and the run id."""
    out = p.exec("weightserver", "ppomq", "weights", "list", "--json", timeout=60).stdout
    doc = json.loads(out)
    return sorted(int(v["version"]) for v in doc["versions"])


def test_up_build_trains_a_finite_run_to_a_solved_summary(project: ComposeProject, tmp_path):
    # PPOMQ_TARGET_RETURN is not one of the variables the file interpolates: it reaches the
    # learner because the file passes every setting through when it is set.
    project.settings = {"PPOMQ_TARGET_RETURN": "475", "PPOMQ_TOTAL_STEPS": "200000"}
    up = project.popen("up", "--build")
    lines: list[str] = []
    try:
        for line in up.stdout or []:
            lines.append(line)
        rc = up.wait(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    output = "".join(lines)
    assert rc == 0, output[-4000:]
    assert "now serving version 1 " in output  # the weightserver served trained weights
    codes = exit_codes(project)
    assert set(codes) == {
        f"{project.name}-{s}"
        for s in ("keys-1", "weightserver-1", "learner-1", "actor-1", "actor-2")
    }, codes
    assert all(code == 0 for code in codes.values()), codes
    # The data plane ran under CURVE, with the keys the `keys` job made on this first `up`.
    assert "make-keys: wrote new CURVE keys" in output
    assert "(CURVE, allow-list /keys/server/allowed)" in output  # the learner's start line
    # The multi-host recipe's first step: the actors' key, copied out of the exited job.
    copied = tmp_path / "actor-keys"
    project.run("cp", "keys:/keys/actor", str(copied))
    assert sorted(p.name for p in copied.iterdir()) == ["actor-0.key_secret", "server.key"]
    summary = read_summary(project, tmp_path)
    assert summary["solved_at_env_steps"] is not None, summary
    assert summary["final_mean_return_20"] >= 475
    assert summary["actors"] == 2 and summary["batches_accepted"] > 0
    assert summary["total_env_steps"] < 200_000  # it ended at the target, not the budget


def test_learner_group_profile_trains_a_finite_run_on_both_ranks(project: ComposeProject, tmp_path):
    """`PPOMQ_LEARNERS=2 docker compose --profile learner-group up`: the learner (rank 0)
    and learner-1 (rank 1) form one group, each actor sends to rank index mod 2 (its
    index from its hostname), both ranks end with the same weights, and every container
    exits 0; rank 0's summary counts the group."""
    project.settings = {"PPOMQ_LEARNERS": "2", "PPOMQ_TOTAL_STEPS": "20000",
                        "PPOMQ_EVAL_EPISODES": "2"}  # fmt: skip
    up = project.popen("--profile", "learner-group", "up", "--build", "--scale", "actor=4")
    try:
        output = "".join(up.stdout or [])
        rc = up.wait(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert rc == 0, output[-4000:]
    codes = exit_codes(project)
    expected = {"keys-1", "weightserver-1", "learner-1", "learner-1-1"}
    expected |= {f"actor-{i}" for i in range(1, 5)}
    assert set(codes) == {f"{project.name}-{s}" for s in expected}, codes
    assert all(code == 0 for code in codes.values()), codes
    for rank in (0, 1):
        assert f"learner rank {rank} joined the group of 2" in output
    digests = set(re.findall(r"learner rank \d done at version \d+.*weights sha256 (\w+)", output))
    assert len(digests) == 1, digests  # both ranks logged it, the same
    # Each actor's rank is its index mod 2: rank 1's actors say so when they switch.
    to_rank1 = set(re.findall(r"actor (a(\d+)-\S+): sending rollouts to tcp://learner-1:5555 "
                              r"\(learner rank 1 of 2\)", output))  # fmt: skip
    actors = set(re.findall(r"actor (a(\d+)-\S+): 8 x CartPole", output))
    assert len(actors) == 4, actors
    assert to_rank1 == {(a, i) for a, i in actors if int(i) % 2 == 1}, (actors, to_rank1)
    summary = read_summary(project, tmp_path)
    assert summary["learners"] == 2 and summary["total_env_steps"] >= 20_000, summary
    # Rank 0 counts every rank's actors: each one's batches were trained on.
    assert {a for a, _ in actors} == set(summary["actors_seen"]), summary["actors_seen"]
    assert all(row["accepted"] > 0 for row in summary["actors_seen"].values())


def test_scaled_run_survives_a_killed_actor_a_removed_learner_and_a_redis_restart(
    project: ComposeProject, tmp_path
):
    project.settings = {
        "PPOMQ_TOTAL_STEPS": "300000",
        # Retention off in effect: every version ever published must still be listed.
        "PPOMQ_KEEP_VERSIONS": "100000",
        "PPOMQ_EVAL_EPISODES": "2",
    }
    project.run("up", "--build", "--detach", "--scale", "actor=4", timeout=900)
    latest_seen: list[int] = []
    stop_sampling = threading.Event()

    def latest() -> int:
        value = project.redis_get(f"ppomq:{RUN_ID}:latest")
        if value and value.isdigit():
            latest_seen.append(int(value))
            return int(value)
        return 0

    def sample_latest() -> None:
        while not stop_sampling.wait(0.5):  # a sample each half second until told to stop
            latest()

    sampler = threading.Thread(target=sample_latest, daemon=True)
    sampler.start()
    try:
        wait_slowly(lambda: latest() >= 5, 240, "5 versions")

        # All four replicas train: each is a live actor of the learner's status.
        def live_actors() -> int:
            out = project.exec("weightserver", "ppomq", "status", "--json", check=False)
            return len(json.loads(out.stdout)["actors"]) if out.returncode == 0 else 0

        wait_slowly(lambda: live_actors() == 4, 120, "4 live actors")

        # SIGKILL inside an actor's container: `restart: on-failure` starts it again.
        actor = project.container_id("actor", 1)
        project.engine.docker(
            "exec",
            actor,
            "python",
            "-c",
            "import os, signal; os.kill(-1, signal.SIGKILL)",
            check=False,
        )
        wait_slowly(
            lambda: (
                int(project.engine.docker("inspect", "-f", "{{.RestartCount}}", actor).strip()) >= 1
            ),
            60,
            "the killed actor's restart",
        )

        # The learner container removed mid-run, then started again: it resumes.
        # A version read, not latest()'s 0 for a Redis that did not answer in time (with 0
        # the wait below would pass before the new learner had logged a line).
        before_learner = wait_slowly(latest, 60, "a version before the learner's removal")
        project.run("rm", "--stop", "--force", "learner", timeout=180)
        project.run("up", "--detach", "--no-deps", "learner", timeout=300)

        def learner_log() -> str:
            return project.run("logs", "learner", check=False).stdout

        wait_slowly(
            lambda: any(f"{w} from /data/runs/" in learner_log() for w in ("resumed", "resuming")),
            120,
            "the new learner's resume line",
        )
        wait_slowly(lambda: latest() > before_learner + 3, 240, "versions after the new learner")

        # The Redis container restarted mid-run keeps every version.
        before = versions_listed(project)
        project.run("restart", "redis", timeout=120)
        wait_slowly(lambda: latest() > before[-1] + 3, 240, "versions after the Redis restart")
        after = versions_listed(project)
        assert set(before) <= set(after), sorted(set(before) - set(after))
        redis_log = project.run("logs", "redis").stdout
        assert "NOPERM" not in redis_log, [ln for ln in redis_log.splitlines() if "NOPERM" in ln][
            :3
        ]

        # The run ends by itself: the learner, the weightserver and every actor exit 0.
        wait_slowly(
            lambda: all(
                c["State"] == "exited" for c in project.containers() if c["Service"] != "redis"
            ),
            600,
            "the run's end",
            interval_s=3.0,
        )
    finally:
        stop_sampling.set()
        sampler.join(timeout=30)
    codes = exit_codes(project)
    assert all(code == 0 for code in codes.values()), codes
    assert latest_seen == sorted(latest_seen), "latest went back"
    summary = read_summary(project, tmp_path)
    assert summary["total_env_steps"] >= 300_000
    # Four replicas trained, and the killed one's second incarnation too (a new actor id).
    assert summary["actors"] >= 5, summary["actors_seen"]
    # One learner replaced mid-run: the run resumed once, its clock from where it was.
    assert summary["learner_restarts"] == 1 and summary["resumed_wall_s"] > 0, summary


def test_down_v_leaves_no_container_network_or_volume(project: ComposeProject):
    project.settings = {"PPOMQ_TOTAL_STEPS": "0"}  # open-ended: running when `down` comes
    project.run(
        "--profile", "tensorboard", "up", "--build", "--detach", "--scale", "actor=1", timeout=900
    )
    assert {c["Service"] for c in project.containers()} >= {"redis", "learner", "tensorboard"}
    project.run("--profile", "*", "down", "-v", "--timeout", "10", timeout=180)
    assert project.leftovers() == []
