"""What a starting learner may trust of an earlier one: a verified checkpoint, or, when
asked (--recover), the newest verified weights in Redis with the counters rebuilt from the
checkpoint kept before the damaged one, or from the run dir's own records.

Never counters reset under old records: a checkpoint that is damaged, whose weights differ
from the version Redis holds under its number, or that is missing from a run dir with
records, stops the learner with one line naming what is wrong and the safe ways on.
"""

from __future__ import annotations

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
    found = newest_verified(loop.store)
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
            loop.s.run_dir, header.env_steps, solve_threshold=loop.recorder.solve_threshold
        )
    except RecordsDamaged as exc:
        raise UsageError(f"cannot rebuild the counters: {exc}; pass another --run-dir") from None
    c = records["counters"]
    loop.env_steps = header.env_steps
    loop.trained_samples = c["trained_samples"]
    loop.discarded_env_steps = c["discarded_env_steps"]
    loop.wall_offset = c["wall_s"]
    loop.start = time.monotonic()
    loop.phase_totals = Counter(c["phase_totals"])
    loop.gate.accepted = c["accepted"]
    loop.produced_batches = c["accepted"]
    loop.restarts = 1
    loop.recorder.set_state(records["recorder"], env_steps=header.env_steps)
    log.warning("rebuilt from version %d and %d record rows: %d env steps, %d episodes; the "
                "optimizer, reject counts and actor ledger start afresh", header.version,
                records["rows"], loop.env_steps, loop.recorder.episodes)  # fmt: skip
    return header.version
