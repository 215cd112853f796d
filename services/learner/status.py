"""What `ppomq status` reads: the learner's figures and one row per kept actor, in Redis.

Best effort: training never waits on it, and a Redis blip costs one status write."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from ppomq.core.settings import LearnerSettings
from ppomq.core.store.keys import RunKeys
from ppomq.learner.admission import Admission
from ppomq.learner.run_state import RunState
from ppomq.learner.wait_share import WaitShare

log = logging.getLogger("ppomq.learner")

# The whole actors hash is rewritten this often even when no row moved: a Redis that lost
# it gets it back.
FULL_WRITE_EVERY_S = 10.0
# Status writes happen every second: a failing one is said at most this often.
WARN_EVERY_S = 10.0
# The actors whose wait for weights counts: those heard from this recently, as `ppomq
# status` lists them by default (an Atari actor sends a batch every few seconds).
LIVE_WITHIN_S = 60.0


class StatusWriter:
    """Writes the status and the actors hash of one run; remembers what it last wrote."""

    def __init__(self, *, redis: Any, settings: LearnerSettings, learners: int = 1) -> None:
        self.redis = redis
        self.keys = RunKeys(settings.run_id)
        self.fixed = {
            "mode": settings.mode,
            "max_staleness": settings.max_staleness,
            "max_actors": settings.max_actors,
            "forget_actor_after_s": settings.forget_actor_after_s,
            "learners": learners,  # ranks of a learner group; the counters are the group's
        }
        # Each actor row's change marks as last written, and when the whole hash was.
        self._rows_written: dict[str, tuple[Any, Any]] = {}
        self._full_at = float("-inf")
        self._warned_at = float("-inf")
        self.wait_share = WaitShare()

    def write(
        self, run: RunState, admission: Admission, counts: dict[str, Any] | None = None
    ) -> None:
        """`counts`: admission's counters to show (a learner group's, added up over its
        ranks); None: `admission`'s own."""
        counts = admission.counts() if counts is None else counts
        assert run.recorder is not None
        status = {
            "version": run.version,
            "env_steps": run.env_steps,
            "discarded_env_steps": counts["discarded_env_steps"],
            "wall_s": run.wall_s,
            "sps": run.sps,
            "mean_return_20": run.recorder.mean_return,
            "episodes": run.recorder.episodes,
            "episodes_unverified": run.episodes_unverified,
            "batches_accepted": counts["batches_accepted"],
            "rejects": counts["rejects"],
            "live_actors": counts["live_actors"],
            # Which side binds (`ppomq status`, the progress line): the learner's recent
            # share of time waiting for rollouts, and its actors' for weights.
            "learner_wait_fraction": self.wait_share.observe(run.phase_totals),
            "actors_weights_wait": actors_weights_wait(
                admission.actors.values(), since=time.time() - LIVE_WITHIN_S
            ),
            # Totals of every actor ever seen; per actor in the `actors` hash (bounded).
            "ledger": counts["ledger"],
            "learner_restarts": run.restarts,
            "updated_at": run.updated_at,  # the last update (or the start)
            "counts_at": time.time(),  # rejects and the ledger: at most a second old
            **self.fixed,
        }
        try:
            # One transaction: `ppomq status` never reads the actors between DEL and HSET.
            pipe = self.redis.pipeline(transaction=True)
            pipe.set(self.keys.stats, json.dumps(status))
            full = self._actor_rows(pipe, admission)
            pipe.execute()
            if full:
                self._full_at = time.monotonic()
        except Exception as exc:  # Redis blips must not stop training
            self._rows_written = {}  # the next write is a whole one
            if time.monotonic() - self._warned_at > WARN_EVERY_S:
                self._warned_at = time.monotonic()
                log.warning("could not write status to Redis: %s", exc)

    def _actor_rows(self, pipe: Any, admission: Admission) -> bool:
        """Queue the actor rows that changed on `pipe`; True when it rewrites them all.

        Up to --max-actors rows (made-up ids fill them), and a write follows every update,
        so a row is written again only when its actor's `batches` or its ledger row's
        `received` moved (what every batch and every ledger note changes)."""
        rows = admission.ledger.actors
        written = self._rows_written
        full = not written or time.monotonic() - self._full_at >= FULL_WRITE_EVERY_S
        marks: dict[str, tuple[Any, Any]] = {}
        changed: dict[str, str] = {}
        for k, v in admission.actors.items():
            row = rows.get(k)
            marks[k] = (v["batches"], None if row is None else row["received"])
            if full or written.get(k) != marks[k]:
                changed[k] = json.dumps(v if row is None else dict(v, ledger=row))
        # Actors whose every batch the door refused (stale, future version, surplus): no
        # batch of theirs was admitted, but their ledger row is worth showing.
        for k, row in rows.items():
            if k in marks:
                continue
            marks[k] = (None, row["received"])
            if full or written.get(k) != marks[k]:
                changed[k] = json.dumps({
                    "last_seen": row["last_seen"], "policy_version": None,
                    "batches": row["received"], "env_steps": 0, "ledger": row,
                })  # fmt: skip
        gone = [k for k in written if k not in marks]
        if full:
            pipe.delete(self.keys.actors)
        elif gone:
            pipe.hdel(self.keys.actors, *gone)
        if changed:
            pipe.hset(self.keys.actors, mapping=changed)
        self._rows_written = marks
        return full


def actors_weights_wait(rows: Iterable[dict[str, Any]], *, since: float) -> float | None:
    """The mean of the `weights_wait` the actors heard from since `since` (Unix time) sent
    with their last batch; None when none of them sends one (an actor of an older release)."""
    shares = [
        float(r["weights_wait"])
        for r in rows
        if r.get("weights_wait") is not None and r.get("last_seen", 0.0) >= since
    ]
    return round(sum(shares) / len(shares), 4) if shares else None
