"""`ppomq train`."""

from __future__ import annotations

from typing import Any

from ppomq.commands._service import add_service_command


def _run(settings: Any) -> int:
    from ppomq.launch.train import run_train

    return run_train(settings)


def _cls() -> type:
    from ppomq.core.settings import TrainSettings

    return TrainSettings


def register(sub: Any) -> None:
    add_service_command(
        sub,
        "train",
        settings_cls=_cls,
        run=_run,
        help="train on this machine: Redis, weightserver, learner and actors",
        description="Starts a real Redis (embedded unless --redis-url), a weightserver, a "
        "learner and --actors actor processes on loopback, shows progress, and stops at "
        "--total-steps, --duration-s or --target-return (or Ctrl-C; a second Ctrl-C stops "
        "faster), leaving a run dir. A child that crashes is restarted (after 0.5 s, "
        "doubling to 30 s; the learner resumes from its checkpoint); five crashes of one "
        "child within 2 minutes, a child's usage error, or Redis gone end the run with one "
        "line saying why.",
    )
