"""`python -m benchmarks.variants run-ahead` end to end on two tiny real runs: the arms' flags reach
`ppomq train`, every figure is read back from the run dir and the actors' logs, and the
table compares each arm with lockstep on the same seed."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from benchmarks import variants as bench
from ppomq.core.settings import LearnerSettings

MAX_STALENESS = LearnerSettings.model_fields["max_staleness"].default

pytestmark = pytest.mark.slow


def test_two_arms_on_a_tiny_cartpole_give_every_figure(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(
        bench.TASKS, "cartpole", dict(bench.TASKS["cartpole"], steps=3000, target=600.0)
    )
    code = bench.main(["run-ahead", "--tasks", "cartpole", "--arms", "lockstep,runahead-vtrace",
                       "--seeds", "1", "--out", str(tmp_path), "--workdir",
                       str(tmp_path / "runs"), "--lock", ""])  # fmt: skip
    doc = json.loads((tmp_path / "variants_run_ahead.json").read_text())
    assert code == 0, [r.get("error") for r in doc["runs"]]
    by_arm = {r["arm"]: r for r in doc["runs"]}
    assert "--targets vtrace" in by_arm["runahead-vtrace"]["command"]
    assert "--batches-per-version 1" in by_arm["lockstep"]["command"]
    for r in by_arm.values():
        assert 0 < r["actor_sample_share"] <= 1
        assert 0 <= r["learner_wait_share"] <= 1
        # The learner refuses batches older than --max-staleness; lock-step actors wait for
        # every version, so theirs are at most one behind.
        given = re.search(r"--max-staleness (\d+)", r["command"])
        bound = 1 if r["arm"] == "lockstep" else int(given.group(1)) if given else MAX_STALENESS
        assert 0 <= r["mean_policy_age"] <= bound and 0 <= r["waste_ratio"] < 1
        assert r["approx_kl"] >= 0 and 0 <= r["clip_fraction"] <= 1 and r["kl_curve"]
        assert r["env_steps"] >= 3000 and r["time_to_target_s"] is None  # 600: out of reach
    # Actors that never wait for weights spend more of their loop sampling.
    ahead, lockstep = by_arm["runahead-vtrace"], by_arm["lockstep"]
    assert ahead["actor_sample_share"] > lockstep["actor_sample_share"]
    rows = {row["arm"]: row for row in doc["summary"]}
    assert rows["lockstep"]["command_s_vs_baseline"] == 1.0
    md = (tmp_path / "variants_run_ahead.md").read_text()
    assert "| cartpole | runahead-vtrace | 2 | 1 |" in md


def test_the_scan_keeps_the_update_size_of_two_actors() -> None:
    jobs = bench.plan(["cartpole"], ["lockstep", "runahead-vtrace"], [1], scan=True)
    sizes = {}
    for job in jobs:
        argv = bench.command(job, Path("/r"))
        sizes[job.arm, job.actors] = argv[argv.index("--batch-samples") + 1]
    # Actors that never wait get the fixed size (2 actors x 8 envs x 32 steps = 512) at any
    # number of actors; lock-step actors get the per-actor rule (0), which is 512 at 2.
    assert sizes == {
        ("lockstep", 2): "0",
        ("runahead-vtrace", 2): "512",
        ("runahead-vtrace", 1): "512",
        ("runahead-vtrace", 4): "512",
    }


def test_the_objective_study_compares_both_objectives_in_sync_mode() -> None:
    jobs = bench.plan(["cartpole", "halfcheetah"], list(bench.STUDIES["objective"]["arms"]),
                      [1, 2], scan=False)  # fmt: skip
    assert {(j.task, j.arm) for j in jobs} == {
        (t, a) for t in ("cartpole", "halfcheetah") for a in ("sync-clip", "sync-kl-penalty")
    }
    for job in jobs:
        argv = " ".join(bench.command(job, Path("/r")))
        assert "--mode sync" in argv and f"--objective {job.arm.removeprefix('sync-')}" in argv
    assert bench.baseline_of("sync-kl-penalty") == "sync-clip"
    assert bench.baseline_of("runahead-vtrace") == "lockstep"


def test_a_task_without_a_target_reports_no_steps_to_target() -> None:
    # HalfCheetah runs without --target-return; the one seed that crossed the env's own
    # threshold must not become the arm's "steps to target".
    runs = [
        {"ok": True, "task": "halfcheetah", "arm": arm, "actors": 2, "seed": seed,
         "command_s": 100.0 + seed, "solved_at_env_steps": 900_000 if seed == 2 else None,
         "time_to_target_s": 90.0 if seed == 2 else None, "mean_return_20": 1000.0 * seed}
        for arm in ("lockstep", "runahead-vtrace") for seed in (1, 2)
    ]  # fmt: skip
    rows = {row["arm"]: row for row in bench.summarise(runs)}
    for row in rows.values():
        assert row["solved_at_env_steps"] is None and row["time_to_target_s"] is None
        assert row["solved_at_env_steps_vs_baseline"] is None
        assert "reached" not in row
    assert rows["lockstep"]["mean_return_20"] == 1500.0
    assert rows["runahead-vtrace"]["command_s_vs_baseline"] == 1.0


# Each arm's (norm-obs, norm-returns, clip-vloss, anneal-lr-steps, shuffle-minibatches,
# vf-coef, init).
BREAKOUT_ARMS = {
    "cleanrl": (False, False, True, 0, True, 0.5, "cleanrl"),
    "norm-obs": (True, False, True, 0, True, 0.5, "cleanrl"),
    "no-clip-vloss": (False, False, False, 0, True, 0.5, "cleanrl"),
    "norm-returns": (True, True, True, 0, True, 0.5, "cleanrl"),
    "norm-returns-no-clip-vloss": (True, True, False, 0, True, 0.5, "cleanrl"),
    "sf-lr-decay": (True, True, False, 4_000_000, True, 0.5, "cleanrl"),
    "unshuffled": (True, True, False, 0, False, 0.5, "cleanrl"),
    "sf-value-weight": (True, True, False, 0, True, 1.0, "cleanrl"),
    "sf-init": (True, True, False, 0, True, 0.5, "unit"),
}


def test_the_breakout_study_compares_returns_at_each_mark_on_the_1m_schedule() -> None:
    arms = list(bench.STUDIES["breakout-factors"]["arms"])
    assert arms == list(BREAKOUT_ARMS)
    jobs = bench.plan(["breakout"], arms, [1, 2], scan=False)
    for job in jobs:
        argv = " ".join(bench.command(job, Path("/r")))
        assert "--preset atari" in argv and "--total-steps 1000000" in argv
        # Each arm names all seven settings, so the preset's own values do not leak in.
        norm_obs, norm_returns, clip_vloss, horizon, shuffle, vf_coef, init = BREAKOUT_ARMS[job.arm]
        on = {"norm-obs": norm_obs, "norm-returns": norm_returns, "clip-vloss": clip_vloss,
              "shuffle-minibatches": shuffle}  # fmt: skip
        for flag, value in on.items():
            assert (f" --{flag}" in argv) == value and (f" --no-{flag}" in argv) != value
        assert argv.count("--anneal-lr-steps") == 1 and f"--anneal-lr-steps {horizon} " in argv
        assert argv.count("--vf-coef") == 1 and f"--vf-coef {vf_coef} " in argv
        assert argv.count("--init") == 1 and f"--init {init}" in argv
    # Curve rows: [env steps, seconds, return, mean of the last 20].
    curve = [[50_000, 1.0, 2.0, 1.5], [120_000, 2.0, 9.0, 4.0], [140_000, 3.0, 9.0, 8.0]]
    assert bench.returns_at(curve, (100_000, 150_000)) == {
        "100000": 1.5, "150000": None,  # the run ended before 150k
    }  # fmt: skip
    runs = [
        {"ok": True, "task": "breakout", "arm": arm, "actors": 2, "seed": seed,
         "command_s": 720.0, "return_at": {"100000": seed + k, "150000": 2 * seed + k}}
        for k, arm in enumerate(("cleanrl", "norm-obs")) for seed in (1, 2, 3)
    ]  # fmt: skip
    doc = {"study": "breakout-factors", "runs": runs, "summary": bench.summarise(runs)}
    rows = {row["arm"]: row for row in doc["summary"]}
    assert rows["norm-obs"]["return_at"] == {"100000": 3, "150000": 5}
    md = bench.render_markdown(doc)
    assert "| breakout | **norm-obs** | median | 3.0 | 5.0 |" in md
    assert "| breakout | cleanrl | 3 | 3.0 | 6.0 |" in md


def test_the_device_task_takes_its_flags_last_and_runs_several_at_once(
    tmp_path: Path, monkeypatch
) -> None:
    job = bench.Job("breakout-device", "norm-returns", 2, 3)
    argv = bench.command(job, Path("/r"), "--device cuda --duration-s 300")
    assert argv.index("--env-backend") < argv.index("--device") < argv.index("--norm-returns")
    assert argv[argv.index("--duration-s") + 1] == "300"
    # --concurrent: the runs overlap (no bench lock), and every one is saved.
    active, most = [0], [0]
    gate = threading.Barrier(3, timeout=10)

    def fake_run(job, workdir, lock, timeout_s, *, task_flags, marks):
        assert lock is None and task_flags == "--device cpu" and marks == (1000,)
        active[0] += 1
        most[0] = max(most[0], active[0])
        gate.wait()  # all three are running at once
        active[0] -= 1
        return {"task": job.task, "arm": job.arm, "actors": job.actors, "seed": job.seed,
                "ok": True, "command_s": 1.0, "return_at": {"1000": float(job.seed)}}  # fmt: skip

    monkeypatch.setattr(bench, "run_job", fake_run)
    code = bench.main(["breakout-factors", "--tasks", "breakout-device", "--arms",
                       "norm-returns", "--seeds", "1,2,3", "--concurrent", "3", "--task-flags",
                       "--device cpu", "--marks", "1000", "--out", str(tmp_path)])  # fmt: skip
    assert code == 0 and most[0] == 3
    doc = json.loads((tmp_path / "variants_breakout_factors.json").read_text())
    assert sorted(r["seed"] for r in doc["runs"]) == [1, 2, 3]
    md = (tmp_path / "variants_breakout_factors.md").read_text()
    assert "Up to 3 runs went at once" in md
    assert "| breakout-device | **norm-returns** | median | 2.0 |" in md
