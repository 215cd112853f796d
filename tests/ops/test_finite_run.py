"""A finite run's end, with the services started separately (compose, k8s Jobs): when the
learner reaches --total-steps it marks the run finished in Redis and exits 0; the
weightserver tells the actors, and both exit 0 by themselves. Started again on the same
run id, the learner starts a new run (the finished one's run dir moved aside) unless
--resume asks it to go on with the finished one.

Real processes, a real redis-server, loopback sockets. Deadlines bound liveness only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ppomq.learner.checkpoint import read_checkpoint

from .services import PPOMQ, STOPPED_BY_SIGTERM, System

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STEPS = 1024  # 8 batches of 4 envs x 32 steps


def _run_to_the_end(system: System) -> None:
    """Start every service; the learner, then the others, exit 0 by themselves."""
    system.start()
    assert system.exit_code(system.learner, 240) == 0, system.learner.log()
    for service in (*system.actors, system.weightserver):
        assert system.exit_code(service, 60) == 0, service.log()


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_finite_run_ends_everywhere_and_a_new_start_is_a_new_run(redis_url, tmp_path):
    with System(
        tmp_path, redis_url, run_id="finite", learner_args=["--total-steps", str(STEPS)]
    ) as system:
        _run_to_the_end(system)
        marker = json.loads(system.redis.get(system.keys.finished))
        first_last = system.latest()
        assert marker["version"] == first_last and marker["env_steps"] >= STEPS
        ckpt = read_checkpoint(system.run_dir / "checkpoints" / "ckpt.pt").state
        assert ckpt["finished"] is True
        assert json.loads((system.run_dir / "finished.json").read_text()) == marker
        assert "finished: actor" in system.actors[0].log(100_000)
        assert "weightserver exiting" in system.weightserver.log(100_000)

        # `up` again: the weightserver starts on the old marker and must wait for the new
        # run's end; the learner starts a new run whose versions go on from the old ones.
        _run_to_the_end(system)
        learner_log = system.learner.log(100_000)
        assert "a new run starts at version" in learner_log, learner_log
        old = system.run_dir.with_name("run.1")
        assert _summary(old)["total_env_steps"] >= STEPS
        new = _summary(system.run_dir)
        assert STEPS <= new["total_env_steps"] < 2 * STEPS + 1024
        assert new["learner_restarts"] == 0
        assert (system.latest() or 0) > first_last
        marker2 = json.loads(system.redis.get(system.keys.finished))
        assert marker2["version"] == system.latest()

        # Asked explicitly, the learner goes on with the finished run (a higher target).
        system.learner.argv += ["--resume", "--total-steps", str(3 * STEPS)]
        _run_to_the_end(system)
        assert "going on with it (--resume)" in system.learner.log(100_000)
        resumed = _summary(system.run_dir)
        assert resumed["total_env_steps"] >= 3 * STEPS
        assert resumed["learner_restarts"] == 1
        assert not system.run_dir.with_name("run.2").exists()


def test_annealing_off_without_total_steps_is_said_once(redis_url, tmp_path):
    """An open-ended learner says in one line that learning-rate annealing is off."""
    with System(tmp_path, redis_url, run_id="open-ended", actors=1) as system:
        system.learner.start()
        system.wait_for(
            lambda: system.latest() is not None,
            timeout_s=120,
            what="version 0",
            allow_down=[system.weightserver, *system.actors],
        )
        log = system.learner.log(100_000)
        assert log.count("learning-rate annealing is off") == 1, log
        assert system.learner.stop(timeout=60) == STOPPED_BY_SIGTERM  # open-ended: unfinished


def test_train_no_resume_on_a_finished_run_dir_is_one_line(tmp_path):
    """`ppomq train --no-resume` refuses a finished --run-dir before starting anything (the
    learner would move the dir, with the launcher's logs in it, aside)."""
    run_dir = tmp_path / "done"
    run_dir.mkdir()
    (run_dir / "finished.json").write_text('{"version": 3}\n')
    out = subprocess.run(
        [*PPOMQ, "train", "--no-resume", "--run-dir", str(run_dir), "--total-steps", "128"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds a finished run" in lines[0], out.stderr
