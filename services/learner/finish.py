"""The end of a run: final weights, greedy evaluation, summary.json, learning curve, and
the finished marker."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from ppomq.core.errors import StorageFullError
from ppomq.core.events import EventWriter
from ppomq.core.models import Policy
from ppomq.core.rundir import (
    FINISHED_FILE,
    plot_learning_curve,
    write_bytes_atomic,
    write_json_atomic,
)
from ppomq.core.settings import LearnerSettings
from ppomq.core.signals import FastStop, WarmStop
from ppomq.core.storage import storage_error
from ppomq.learner.admission import waste_ratio
from ppomq.learner.loop import LearnerLoop

log = logging.getLogger("ppomq.learner")

# How often a running evaluation says so (learner.evaluate); the launcher calls one silent
# for many of these (ppomq.launch.evaluation) a hang.
EVAL_BEAT_S = 2.0


def save_final_weights(path: Path, policy: Policy, meta: dict[str, Any]) -> None:
    """Through a buffer and write_bytes_atomic: a full disk is an OSError naming the file
    (torch's own writer says only "iostream error"), and never leaves half a file."""
    buf = io.BytesIO()
    torch.save({"state_dict": policy.state_dict(), "metadata": meta}, buf)
    write_bytes_atomic(path, buf.getvalue())


class EvaluationBeat:
    """The evaluation's `learner.evaluate` events: one as it starts, then one every
    EVAL_BEAT_S while it runs (its `progress` callback), so that the launcher shows its
    progress, waits for a long evaluation, and still tells a learner that hangs."""

    def __init__(self, events: EventWriter, episodes: int, limit_s: float) -> None:
        self.events = events
        self.episodes = episodes
        self.limit_s = limit_s
        self.start = self.last = time.monotonic()
        events.emit("learner.evaluate", episodes=episodes, done=0, steps=0, elapsed_s=0.0,
                    limit_s=limit_s)  # fmt: skip

    def __call__(self, done: int, steps: int) -> None:
        now = time.monotonic()
        if now - self.last >= EVAL_BEAT_S:
            self.last = now
            self.events.emit(
                "learner.evaluate", episodes=self.episodes, done=done, steps=steps,
                elapsed_s=round(now - self.start, 1), limit_s=self.limit_s,
            )  # fmt: skip


def finish_run(
    loop: LearnerLoop,
    settings: LearnerSettings,
    threshold: float | None,
    stop: WarmStop | None = None,
    events: EventWriter | None = None,
) -> StorageFullError | None:
    """Final weights, evaluation, summary.json and the learning-curve PNG (unless
    --no-learning-curve, which `ppomq train` gives its learner: it draws the curve itself).

    After a fast stop (a second signal, `stop.fast`) the evaluation is skipped, and one
    that a second signal interrupts is dropped; the files are always written, each on its
    own: on a full or read-only disk, what fits is written, and the error is returned (the
    log says which file was not). The evaluation is announced on `events`
    (EvaluationBeat)."""
    from ppomq.core.evaluate import evaluate_policy

    run_dir = Path(settings.run_dir)
    run, admission = loop.run, loop.admission
    meta = {
        "version": run.version,
        "env_id": settings.env_id,
        "run_id": settings.run_id,
        "env_steps": run.env_steps,
        "model": loop.trainer.policy.spec,
    }
    policy = loop.trainer.host_policy()  # host tensors: the file loads anywhere
    disk = _written(
        "final_weights.pt",
        lambda: save_final_weights(run_dir / "final_weights.pt", policy, meta),
        run_dir,
    )
    # Training's time, not the evaluation's: the summary's SPS is what the run trained at.
    wall = run.wall_s
    evaluation = None
    if settings.eval_episodes > 0 and not (stop is not None and stop.fast):
        log.info("final evaluation: %d greedy episodes, at most %g s",
                 settings.eval_episodes, settings.eval_timeout_s)  # fmt: skip
        beat = EvaluationBeat(
            events or EventWriter(None, "learner"), settings.eval_episodes, settings.eval_timeout_s
        )
        # The learner is busy, not waiting for the actors: their silence meanwhile is none.
        with loop.receiving.busy():
            try:
                evaluation = evaluate_policy(
                    policy,
                    settings.env_id,
                    episodes=settings.eval_episodes,
                    seed=settings.seed + 10_000,
                    time_limit_s=settings.eval_timeout_s,
                    progress=beat,
                )
            except FastStop:
                log.info("final evaluation skipped: stopping fast")
            except Exception:  # a trained run's summary must not be lost to its evaluation
                log.exception("final evaluation failed; summary.json says final_eval_return null")
    phases = dict(run.phase_totals)
    # A learner group's counters are the sums over its ranks, its actors every rank's.
    counts = loop.counts()
    rejects = counts["rejects"]
    totals = counts["ledger"]
    actors = admission.actors if loop.group_actors is None else loop.group_actors
    ledger = admission.ledger.summary()
    if loop.group_ledger is not None:
        ledger["actors"] = dict(sorted(loop.group_ledger.items()))
    ledger["totals"] = totals
    produced, accepted = counts["batches_produced"], counts["batches_accepted"]
    summary = {
        "env_id": settings.env_id,
        "mode": settings.mode,
        # The actors that trained (an accepted batch each), not the --actors hint: under
        # `compose --scale actor=4` or an HPA the hint says nothing of what ran.
        # Counted by the ledger: actors forgotten since (bounded state) still count.
        "actors": totals["actors_trained"],
        "actors_hint": settings.actors,
        "learners": 1 if loop.group is None else loop.group.world_size,
        "run_id": settings.run_id,
        # Accepted batches only; refused (stale ...) batches' env steps are discarded.
        "total_env_steps": run.env_steps,
        "discarded_env_steps": counts["discarded_env_steps"],
        "trained_samples": run.trained_samples,
        "wall_seconds": round(wall, 3),
        "sps": round(run.env_steps / max(wall, 1e-9), 1),
        "versions": run.version,
        "batches_produced": produced,  # valid batches received, accepted or not
        "batches_accepted": accepted,
        "batches_rejected": rejects,
        # Valid batches dropped at a full queue for newer ones (async): waste, not refusals.
        "batches_surplus": totals["surplus"],
        # Valid batches received but not trained on (stale, duplicate, surplus ...) over
        # valid batches received: invalid messages are no one's production, and are
        # counted apart (batches_rejected, the ledger's invalid and unattributed).
        "waste_ratio": waste_ratio(produced, accepted),
        "policy_age_histogram": dict(
            sorted(counts["policy_age_histogram"].items(), key=lambda kv: int(kv[0]))
        ),
        "learner_time_s": {k: round(v, 3) for k, v in phases.items()},
        "solve_threshold": threshold,
        "solved_at_env_steps": run.recorder.solved_at_env_steps,
        "solved_at_wall_s": run.recorder.solved_at_wall_s,
        # Learner clock -> Unix time: solved_at_unix = started_unix + solved_at_wall_s -
        # resumed_wall_s (a resumed run's clock starts at the wall time it had reached).
        "started_unix": round(run.start_unix, 6),
        "resumed_wall_s": round(run.wall_offset, 3),
        "final_mean_return_20": run.recorder.mean_return,
        "final_eval_return": None if evaluation is None else evaluation.mean_return,
        # The evaluation apart from training: its episodes, steps and seconds, and whether
        # its time bound (--eval-timeout-s) cut it short. None: it did not run.
        "final_eval": None
        if evaluation is None
        else {
            "episodes": evaluation.episodes,
            "episodes_asked": evaluation.episodes_asked,
            "steps": evaluation.steps,
            "seconds": round(evaluation.seconds, 3),
            "cut_short": evaluation.cut_short,
            "mean_return": evaluation.mean_return,
        },
        "episodes": run.recorder.episodes,
        # Ended in accepted batches, but started where the learner did not see (a batch
        # lost in flight, a learner restart): not in any figure above.
        "episodes_unverified": run.episodes_unverified,
        # The actor incarnations kept (a restarted actor has a new id; bounded as the ledger).
        "actors_seen": {
            k: {
                "batches": v["batches"],
                "accepted": v.get("accepted", 0),
                "env_steps": v["env_steps"],
                "discarded_env_steps": v.get("discarded_env_steps", 0),
            }
            for k, v in sorted(actors.items())
        },
        "learner_restarts": run.restarts,
        # Per actor kept (bounded: --max-actors, --forget-actor-after-s) and totals of every
        # actor seen: sent = received + lost_in_flight, received = accepted + rejected.
        "ledger": ledger,
    }
    with stop.shielded() if stop is not None else nullcontext():
        disk = (
            _written(
                "summary.json", lambda: run.recorder.write_json("summary.json", summary), run_dir
            )
            or disk
        )
        if run.recorder.episodes and settings.learning_curve:
            curve = lambda: plot_learning_curve(run_dir, threshold=threshold)  # noqa: E731
            disk = _written("learning_curve.png", curve, run_dir) or disk
    log.info("run finished: %s", json.dumps(summary))
    return disk


def _written(name: str, write: Callable[[], object], run_dir: Path) -> StorageFullError | None:
    """Run `write`; a full or read-only disk is logged as "NAME not written" and returned."""
    try:
        write()
    except OSError as exc:
        full = storage_error(exc, run_dir=run_dir)
        if full is None:
            raise
        log.error("%s not written: %s", name, full)
        return full
    return None


def mark_finished(loop: LearnerLoop) -> None:
    """The run ended normally: say so in Redis (weightservers tell the actors, and all of
    them exit 0), in RUN_DIR/finished.json, then in the checkpoint (a new start is then a
    new run, unless --resume).

    Redis first: a learner that dies between the two restarts from an unfinished
    checkpoint, finds its end already reached and finishes again."""
    doc = loop.publisher.mark_finished(loop.run.version, loop.run.env_steps)
    write_json_atomic(Path(loop.s.run_dir) / FINISHED_FILE, doc)
    loop.run.finished = True
    loop.checkpoint()
    log.info("run %r marked finished at version %d", loop.s.run_id, loop.run.version)
