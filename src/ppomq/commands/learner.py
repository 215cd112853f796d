"""`ppomq learner`."""

from __future__ import annotations

from typing import Any

from ppomq.commands._service import add_service_command


def _run(settings: Any) -> int:
    from ppomq.learner.service import run_learner

    return run_learner(settings)


def _cls() -> type:
    from ppomq.core.settings import LearnerSettings

    return LearnerSettings


def register(sub: Any) -> None:
    add_service_command(
        sub,
        "learner",
        settings_cls=_cls,
        run=_run,
        help="run the learner: receive rollouts, train PPO, publish weights",
        description="Receives rollout batches, rejects stale ones, trains PPO and publishes "
        "each new version to Redis. SIGTERM finishes the update, checkpoints and exits.",
    )
