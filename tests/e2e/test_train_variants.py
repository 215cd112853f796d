"""End to end: the learner's other algorithms through `ppomq train` on CartPole — actors that
run ahead with V-trace targets, and sync PPO with the adaptive KL penalty — each trains."""

from __future__ import annotations

import csv
import json
import re
import subprocess

import pytest

from .cli import PPOMQ, SMALL
from .cli import clean_env as _env
from .test_train import TRAINED_CARTPOLE

pytestmark = pytest.mark.slow


def _train(run_dir, *flags: str) -> dict:
    out = subprocess.run(
        [*PPOMQ, "train", "--actors", "2", "--total-steps", "6000", "--run-dir", str(run_dir),
         *SMALL, *flags],
        capture_output=True, text=True, timeout=240, env=_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((run_dir / "summary.json").read_text())


def test_run_ahead_actors_with_vtrace_targets_train(tmp_path):
    # Twice the others' steps: trained on data up to 16 versions old, 6,000 steps (24
    # versions) ended at a greedy return of 37 in 2 of 75 runs (median 50); 12,000 steps
    # gave 46.5 to 474 over 30 runs.
    summary = _train(tmp_path / "vtrace", "--targets", "vtrace", "--batches-per-version", "0",
                     "--max-staleness", "16", "--total-steps", "12000")  # fmt: skip
    assert summary["final_eval_return"] >= TRAINED_CARTPOLE
    # Actors that never wait send batches older than the version they train: accepted, not
    # refused, up to 16 versions behind.
    ages = {int(k): v for k, v in summary["policy_age_histogram"].items()}
    assert 1 <= max(ages) <= 16


def test_sync_ppo_with_the_adaptive_kl_penalty_trains_and_adapts_its_coefficient(tmp_path):
    run_dir = tmp_path / "klpen"
    summary = _train(run_dir, "--mode", "sync", "--objective", "kl-penalty")
    assert summary["final_eval_return"] >= TRAINED_CARTPOLE
    with (run_dir / "progress.csv").open() as fh:
        coefs = [float(r["charts/kl_coef"]) for r in csv.DictReader(fh)]
    assert coefs[0] == 1.0  # --kl-penalty-coef's default, then halved or doubled
    assert len(set(coefs)) > 1
    assert all(c / coefs[0] in {2.0**k for k in range(-40, 41)} for c in coefs)


def test_a_learner_slower_than_the_resend_timeout_trains_each_batch_once_and_fresh(tmp_path):
    # Forty epochs make every update (about 30 ms) longer than --resend-after-s and than
    # the actor's 20 ms wait slice. Actors that resent after the setting alone resent 158 to
    # 164 batches of 157 in 20k steps, a version old or dropped; with the timeout following
    # the intervals between versions, none after the first update. The waits for the first
    # update resend in both (2 to 4: no interval seen yet), so they are not counted.
    # The learner drops a resend whose original arrived (beyond its actor's share of the
    # version): a learner that trained it would keep one batch queued ahead of each fresh
    # one, and every later batch would train a version or two old.
    run_dir = tmp_path / "slow"
    summary = _train(run_dir, "--resend-after-s", "0.01", "--update-epochs", "40",
                     "--total-steps", "20000")  # fmt: skip
    resent_at = [
        int(version)
        for log in (run_dir / "logs").glob("actor-*.log")
        for version in re.findall(r"no version newer than v(\d+) .*sending another batch",
                                  log.read_text())
    ]  # fmt: skip
    assert len([v for v in resent_at if v >= 1]) <= 4, resent_at
    ages = {int(k): v for k, v in summary["policy_age_histogram"].items()}
    assert ages.get(0, 0) >= 0.9 * sum(ages.values()), ages
