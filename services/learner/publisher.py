"""The publisher: a version's weights into Redis, where weightservers and the CLI read them,
and the marker that says a run has finished.

While Redis is unreachable a publish retries (redis-py's Retry, backoff capped at 1 s)
rather than losing the trained state to a traceback: actors keep acting on the version
they hold and the weightserver keeps serving it. A retry of a publish that had committed
is recognised by the store. Asked to stop meanwhile, it gives up on that version (the
checkpoint written on the way out still has it) in one line.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import numpy as np

from ppomq.core.settings import LearnerSettings
from ppomq.core.signals import WarmStop
from ppomq.core.store.connect import RedisRetry
from ppomq.core.store.keys import RunKeys
from ppomq.core.store.weight_store import WeightStore
from ppomq.learner.grants import Grants
from ppomq.proto import pack_weights

log = logging.getLogger("ppomq.learner")

# Short waits, so training resumes within about a second of Redis coming back, and a stop
# signal is never held up for long.
PUBLISH_RETRY = RedisRetry(first_s=0.1, cap_s=1.0)
# The finished marker is worth a few seconds' wait: without it weightservers and actors
# only learn of the end at their next poll.
FINISHED_RETRIES = 40


def batches_per_version(settings: LearnerSettings) -> int:
    """Batches an actor may send per version: --batches-per-version (0: any), one in sync
    mode: each actor's share under the per-actor rule (grants.py), and what actors that do
    not read grants follow (the door holds them to their grants)."""
    return 1 if settings.mode == "sync" else int(settings.batches_per_version)


def actor_config(settings: LearnerSettings, learners: list[str] | None = None) -> dict[str, Any]:
    """What actors apply outside the network, published in every weights header: how many
    batches they may send per version (the learner owns the update, so it owns how far
    actors run ahead), the steps per env a batch must hold (an actor set otherwise stops
    rather than have every batch refused), CleanRL's reward scaling (running std of the
    discounted return, clipped) when --norm-reward, and a learner group's rollout
    endpoints, one per rank (an actor sends to the one its index picks: proto/WEIGHTS.md)."""
    out: dict[str, Any] = {
        "batches_per_version": batches_per_version(settings),
        "num_steps": int(settings.num_steps),
    }
    if settings.norm_reward:
        out["reward_norm"] = {"gamma": float(settings.gamma), "clip": 10.0, "epsilon": 1e-8}
    if learners:
        out["learners"] = list(learners)
    return out


class _StopPublishing(Exception):
    """Asked to stop while Redis is unreachable: give up on this version."""


class Publisher:
    """Publishes versions of one run through its WeightStore; remembers the last one."""

    def __init__(
        self, *, store: WeightStore, settings: LearnerSettings, learners: list[str] | None = None
    ) -> None:
        self.store = store
        self.redis = store.client
        self.keys = RunKeys(settings.run_id)
        self.extra = {"env_id": settings.env_id, "run_id": settings.run_id}
        self.actor = actor_config(settings, learners)
        self.published: tuple[int, str] = (-1, "")  # (version, its weights' sha256)

    def publish(
        self,
        version: int,
        state: dict[str, np.ndarray],
        *,
        model: dict[str, Any],
        learner_step: int,
        env_steps: int,
        stop: WarmStop | None = None,
        grants: Grants | None = None,
    ) -> float:
        """Publish `state` as `version`, with what actors may sample with it (`grants`);
        returns the seconds it took."""
        t0 = time.perf_counter()
        actor = self.actor if grants is None else {**self.actor, "grants": grants.header()}
        header, blob = pack_weights(
            version, state, model=model, learner_step=learner_step, env_steps=env_steps,
            extra=self.extra, actor=actor,
        )  # fmt: skip

        def failed(exc: Exception, failures: int) -> None:
            if stop is not None and stop.requested:
                raise _StopPublishing(str(exc))
            if failures == 1 or failures % 20 == 0:
                log.warning("Redis unreachable (%s); retrying the publish of version %d",
                            exc, version)  # fmt: skip

        try:
            PUBLISH_RETRY.call(lambda: self.store.publish(header, blob), failed)
            self.published = (version, header.sha256)
        except _StopPublishing as exc:
            log.error("version %d not published, Redis unreachable (%s); the run dir's "
                      "checkpoint has it", version, exc)  # fmt: skip
        return time.perf_counter() - t0

    def mark_finished(self, version: int, env_steps: int, *, announce: bool = True) -> dict:
        """Say in Redis that the run has finished at `version`; returns the marker.

        With `announce`, the version goes once more on the weights channel in the same
        transaction: a weightserver reads the marker when an announcement wakes it, so it
        tells its actors now rather than at its next poll."""
        doc = {"version": version, "env_steps": env_steps, "unix": round(time.time(), 3)}

        def write() -> None:
            pipe = self.redis.pipeline(transaction=True)
            pipe.set(self.keys.finished, json.dumps(doc))
            if announce:
                pipe.publish(self.keys.channel, str(version))
            pipe.execute()

        retry = RedisRetry(PUBLISH_RETRY.first_s, PUBLISH_RETRY.cap_s, FINISHED_RETRIES)
        retry.call(write, lambda _exc, _failures: None)
        return doc

    def clear_finished(self) -> None:
        """The run is going on: no longer finished."""
        self.redis.delete(self.keys.finished)
