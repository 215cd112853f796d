"""What a starting learner may trust of an earlier one: a verified checkpoint, or, when
asked (--recover), the newest verified weights in Redis with the counters rebuilt from the
checkpoint kept before the damaged one, or from the run dir's own records.

Never counters reset under old records: a checkpoint that is damaged, whose weights differ
from the version Redis holds under its number, or that is missing from a run dir with
records, stops the learner with one line naming what is wrong and the safe ways on.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppomq.core.errors import UsageError
from ppomq.core.models import load_numpy_state
from ppomq.core.rundir import RecordsDamaged, has_records, records_up_to
from ppomq.core.store.weight_store import VersionNotFoundError, WeightStore
from ppomq.learner.checkpoint import (
    CKPT_NAME,
    Checkpoint,
    CheckpointDamaged,
    load_checkpoint,
    load_previous,
    weights_digest,
)
from ppomq.proto import DecodeError
from ppomq.proto.weights_blob import WeightsHeader, unpack_tensors

if TYPE_CHECKING:
    from ppomq.learner.loop import LearnerLoop

log = logging.getLogger("ppomq.learner")


@dataclass(frozen=True)
class ResumeFrom:
    """Where a learner's state comes from: a checkpoint's state, or (rebuild) the newest
    verified weights in Redis with counters from the run dir's records; neither: fresh."""

    state: dict[str, Any] | None = None
    rebuild: bool = False


def weights_mismatch(ckpt: Checkpoint, store: WeightStore) -> str | None:
    """Why the checkpoint's weights cannot be trusted, or None: they must hash to the
    digest written with them, and to the sha256 Redis keeps for their version."""
    policy = ckpt.state["trainer"]["policy"]
    digest = weights_digest({k: v.numpy() for k, v in policy.items()})
    version = int(ckpt.state["version"])
    if ckpt.weights_sha256 is not None and digest != ckpt.weights_sha256:
        return f"its weights of version {version} do not match their sha256"
    try:
        published = store.fetch_header(version).sha256
    except VersionNotFoundError:
        return None  # Redis no longer (or never) held it: nothing to compare with
    if published != digest:
        return (
            f"its weights of version {version} differ from the version {version} Redis holds "
            f"(sha256 {digest[:12]} against {published[:12]})"
        )
    return None


def choose_start(run_dir: Path, store: WeightStore, *, recover: bool) -> ResumeFrom:
    """The state a learner starting on `run_dir` goes on from (see the module docstring);
    a UsageError when it must not start without --recover."""
    path = run_dir / CKPT_NAME
    try:
        ckpt = load_checkpoint(run_dir)
        damage = None if ckpt is None else weights_mismatch(ckpt, store)
    except CheckpointDamaged as exc:
        ckpt, damage = None, exc.reason
    if ckpt is not None and damage is None:
        return ResumeFrom(state=ckpt.state)
    if damage is None:  # no checkpoint
        try:
            records = has_records(run_dir)
        except OSError:
            records = False
        if not records:
            return ResumeFrom()  # a new run dir (Redis may still hold the run's weights)
        damage = "missing, while the run dir holds the records of an earlier learner"
    previous = load_previous(run_dir)
    if previous is not None and weights_mismatch(previous, store) is not None:
        previous = None
    if not recover:
        source = (
            "the checkpoint kept before it" if previous is not None else "the run dir's records"
        )
        what = (
            f"{path} is {damage}"
            if damage.startswith("missing")
            else (f"{path} is damaged: {damage}")
        )
        raise UsageError(
            f"{what}; its records are unchanged. To go on: add --recover (resumes from the "
            f"newest verified weights in Redis with the counters rebuilt from {source}), or "
            "pass another --run-dir to start a new run"
        )
    if path.exists():
        aside = path.with_name(f"ckpt.damaged-{int(time.time())}.pt")
        path.rename(aside)
        log.warning("%s is damaged (%s): kept as %s", path, damage, aside.name)
    if previous is not None:
        log.warning("--recover: going on from the checkpoint kept before it (version %d) "
                    "and the newest verified weights in Redis",
                    previous.state["version"])  # fmt: skip
        return ResumeFrom(state=previous.state)
    log.warning(
        "--recover: no checkpoint to trust; going on from the newest verified weights in "
        "Redis with the counters rebuilt from the run dir's records"
    )
    return ResumeFrom(rebuild=True)


def newest_verified(store: WeightStore) -> tuple[WeightsHeader, bytes] | None:
    """The newest version in Redis whose blob matches its sha256; None if none does."""
    for info in reversed(store.list_versions()):
        try:
            return store.fetch(info.version, verify=True)
        except (DecodeError, VersionNotFoundError):
            log.warning("version %d in Redis does not verify; trying the one before", info.version)
    return None


def rebuild_from_records(loop: LearnerLoop) -> int:
    """Set the loop's policy to the newest verified weights in Redis and its counters from
    the run dir's records at those weights' env steps (rows after them are cut off);
    returns the version adopted. What the records do not hold (optimizer moments, reject
    counts by reason, the per-actor ledger) starts afresh, as the log says."""
    run, admission = loop.run, loop.admission
    found = newest_verified(loop.publisher.store)
    if found is None:
        raise UsageError(
            f"cannot recover run {loop.s.run_id!r}: Redis holds no verified weights of it; "
            "pass another --run-dir to start a new run"
        )
    header, blob = found
    if header.model != loop.trainer.policy.spec:
        raise UsageError(
            f"run {loop.s.run_id!r} in Redis holds another model ({header.model}); "
            "pass the same model settings or another --run-id"
        )
    load_numpy_state(loop.trainer.policy, unpack_tensors(header, blob))
    loop.trainer.updates = header.learner_step
    try:
        records = records_up_to(
            loop.s.run_dir, header.env_steps, solve_threshold=run.recorder.solve_threshold
        )
    except RecordsDamaged as exc:
        raise UsageError(f"cannot rebuild the counters: {exc}; pass another --run-dir") from None
    c = records["counters"]
    run.env_steps = header.env_steps
    run.trained_samples = c["trained_samples"]
    run.restart_clock(c["wall_s"])
    run.phase_totals = Counter(c["phase_totals"])
    run.restarts = 1
    run.recorder.set_state(records["recorder"], env_steps=header.env_steps)
    admission.discarded_env_steps = c["discarded_env_steps"]
    admission.gate.accepted = c["accepted"]
    admission.produced_batches = c["accepted"]
    log.warning("rebuilt from version %d and %d record rows: %d env steps, %d episodes; the "
                "optimizer, reject counts and actor ledger start afresh", header.version,
                records["rows"], run.env_steps, run.recorder.episodes)  # fmt: skip
    return header.version


def move_aside(run_dir: Path) -> Path:
    """Rename a finished run's dir to the first free RUN_DIR.N; returns the new path."""
    for n in itertools.count(1):
        target = run_dir.with_name(f"{run_dir.name}.{n}")
        if not target.exists():
            break
    try:
        run_dir.rename(target)
    except OSError as exc:
        raise UsageError(
            f"cannot move the finished run's dir {run_dir} to {target} ({exc.strerror}); "
            "pass another --run-dir, or --resume to go on with the finished run"
        ) from None
    return target


def resume(
    loop: LearnerLoop,
    ckpt: dict[str, Any] | None,
    *,
    new_run: bool = False,
    rebuild: bool = False,
) -> bool:
    """Set the loop's state from the checkpoint and Redis, at a version to publish now;
    False (nothing to publish) when the checkpoint is of a finished run whose end the
    settings have already reached: the same command run again has nothing to train.

    Versions only rise and a version never carries older weights than the one before it.
    Redis may hold versions the checkpoint does not (published after it was written): the
    newest of them is adopted as the policy (the optimizer moments and counters come from
    the checkpoint). The newest weights are then published under the next number, because
    actors that sent their batch to the learner that died wait for a version above the
    one they hold before they send again."""
    run, store = loop.run, loop.publisher.store
    latest = store.latest_version()
    if new_run:
        run.version = 0 if latest is None else latest + 1
        log.info("run %r had finished at version %s; a new run starts at version %d with "
                 "fresh weights (pass --resume to go on with the finished one instead)",
                 loop.s.run_id, latest, run.version)  # fmt: skip
        return True
    if rebuild:  # --recover without a checkpoint to trust (choose_start)
        run.version = rebuild_from_records(loop) + 1
        return True
    if ckpt is None and latest is None:
        run.version = 0
        return True
    version = -1
    if ckpt is not None:
        loop.restore(ckpt)
        version = int(ckpt["version"])
        if ckpt.get("finished") and run.reached_end():
            run.restarts -= 1  # not a restart: nothing runs
            run.version = version
            return False
    if latest is not None and latest > version:
        # Redis is ahead of the checkpoint, or there is none (killed before its first, or
        # a new run dir for the same run id): the run goes on from its newest weights.
        header, blob = store.fetch(latest, verify=True)
        if header.model != loop.trainer.policy.spec:
            raise UsageError(
                f"run {loop.s.run_id!r} in Redis holds another model ({header.model}); "
                "pass the same model settings or another --run-id"
            )
        load_numpy_state(loop.trainer.policy, unpack_tensors(header, blob))
        log.info("resuming from %s (version %d) with the weights of version %d from Redis, "
                 "which are newer", loop.s.run_dir, version, latest)  # fmt: skip
        version = latest
    run.version = version + 1
    log.info("resumed from %s; version %d has the weights of version %d", loop.s.run_dir,
             run.version, version)  # fmt: skip
    return True
