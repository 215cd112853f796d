"""The exit code a service stopped by a signal gives, which is what a Kubernetes Job reads.

A Job counts a pod that exits 0 as done: an evicted or drained learner, weightserver or
actor that exited 0 on its SIGTERM left the Job Complete with the run unfinished, and no
evicted actor was ever replaced (k8s/components/finite-run). So a service stopped by a
signal before its run's end exits 128 + the signal (143 for SIGTERM), and only a finished
run exits 0. Checked here with real processes on loopback (tests/ops/services.py), as a
Job would see them: a SIGTERM mid-run, then the learner's replacement finishing the run.
"""

from __future__ import annotations

import json
import signal

import pytest

from ppomq.core.signals import WarmStop

from ..ops.services import STOPPED_BY_SIGTERM, System

# 160 batches of 4 envs x 32 steps (tests/ops/services.py ROLLOUT): a few seconds of
# training, so the SIGTERM after version 3 lands well before the end (with 16 batches a
# fast machine finished the run before the test could stop it), and the replacement still
# finishes it in seconds.
TOTAL_STEPS = 20_480


def _deliver(sig: int) -> None:
    signal.raise_signal(sig)  # the handler has run when this returns (in this thread)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_runs_end_gives_128_plus_the_signal(restore_handlers, sig):
    stop = WarmStop().install()
    assert stop.exit_code(finished=False) == 0  # nothing stopped it
    _deliver(sig)
    assert stop.requested
    assert stop.exit_code(finished=False) == 128 + sig  # 143 for SIGTERM, 130 for SIGINT
    # A run that reached its end exits 0 even when a stop signal came during its last step.
    assert stop.exit_code(finished=True) == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_mid_run_exits_143_and_the_replacement_that_finishes_exits_0(redis_url, tmp_path):
    with System(
        tmp_path, redis_url, run_id="evicted", actors=2,
        learner_args=["--total-steps", str(TOTAL_STEPS)],
    ) as system:  # fmt: skip
        system.start()
        evicted, staying = system.actors
        system.wait_for(
            lambda: len(system.actor_entries()) == 2 and (system.latest() or 0) >= 2,
            timeout_s=180, what="both actors' batches and version 2",
        )  # fmt: skip
        # An evicted actor: its warm stop sends the rollout in hand, then it exits 143.
        assert evicted.stop(timeout=30) == STOPPED_BY_SIGTERM, evicted.log()
        assert "stopped (warm stop)" in evicted.log()

        # An evicted learner mid-run: the warm stop still checkpoints and writes the
        # summary, but the exit code says the run is not over.
        system.wait_for(
            lambda: (system.latest() or 0) >= 3, timeout_s=120, what="version 3",
            allow_down=[evicted],
        )  # fmt: skip
        assert system.learner.stop(timeout=120) == STOPPED_BY_SIGTERM, system.learner.log()
        summary = json.loads((system.run_dir / "summary.json").read_text())
        assert 0 < summary["total_env_steps"] < TOTAL_STEPS, summary
        assert system.redis.get(system.keys.finished) is None  # not marked finished
        assert staying.alive() and system.weightserver.alive()

        # Its replacement (what the Job starts in its place) resumes and finishes the run:
        # exit 0, and then the actor and the weightserver that were not evicted exit 0 too.
        system.learner.start()
        assert system.exit_code(system.learner, 300) == 0, system.learner.log()
        assert "resum" in system.learner.log(100_000).lower()
        for service in (staying, system.weightserver):
            assert system.exit_code(service, 60) == 0, service.log()
        done = json.loads((system.run_dir / "summary.json").read_text())
        assert done["total_env_steps"] >= TOTAL_STEPS, done
