"""`ppomq actor`."""

from __future__ import annotations

from typing import Any

from ppomq.commands._service import add_service_command


def _run(settings: Any) -> int:
    from ppomq.actor.service import run_actor

    return run_actor(settings)


def _cls() -> type:
    from ppomq.core.settings import ActorSettings

    return ActorSettings


def register(sub: Any) -> None:
    add_service_command(
        sub,
        "actor",
        settings_cls=_cls,
        run=_run,
        help="run an actor: step envs with the newest policy, stream rollouts",
        description="Steps N Gymnasium envs with the newest policy from a weightserver and "
        "streams T-step rollout batches to the learner. Scale by running more of them.",
    )
