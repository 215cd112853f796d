"""`python -m benchmarks.learning` on synthetic runs: planning, reading run dirs, merging,
resuming, the table's figures and the files it writes. No training: the ppomq command is
this module run as a fake that writes a run dir in milliseconds, and the peers' results are
written by hand in their format."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import harness
from benchmarks import learning as bench
from benchmarks.contenders.mujoco_common import EpisodeLog, write_result

T0 = 1_800_000_000.0  # a command's start, unix


def _rec(contender: str, seed: int, command_s: float, ret: float, **kw: Any) -> dict[str, Any]:
    """A finished run's record as run_job leaves it."""
    rec = {
        "mode": "side-by-side",
        "task": "HalfCheetah-v5",
        "contender": contender,
        "seed": seed,
        "total_steps": 1_000_000,
        "env_id": bench.env_for(contender, "HalfCheetah-v5"),
        "ok": True,
        "error": None,
        "command_s": command_s,
        "to_n_steps_s": command_s - 5,
        "startup_s": 2.0,
        "env_steps": 1_000_000,
        "sps": round(1_000_000 / (command_s - 5), 1),
        "train_sps": None,
        "mean_return_20": ret,
        "eval_return": ret + 10,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [1.5, 1.2, 1.1],
        "curve": [[1000, 3.0, -300.0, -300.0], [1_000_000, command_s - 5, ret, ret]],
    }
    rec.update(kw)
    return rec


def _side_by_side_runs() -> list[dict[str, Any]]:
    return [
        _rec("ppomq", 1, 100.0, 1500.0),
        _rec("ppomq", 2, 120.0, 1700.0),
        _rec("cleanrl", 1, 300.0, 1400.0),
        _rec("cleanrl", 2, 200.0, 1450.0),
        _rec("sb3", 1, 250.0, 1600.0),
        _rec("sb3", 2, 230.0, 1800.0),
    ]


def test_side_by_side_rotates_the_order_with_the_seed() -> None:
    jobs = bench.plan(
        "side-by-side", ["HalfCheetah-v5"], ["ppomq", "cleanrl", "sb3"], [5, 6, 7], 10
    )
    orders = [[j.contender for j in jobs if j.seed == s] for s in (5, 6, 7)]
    assert orders == [
        ["ppomq", "cleanrl", "sb3"],
        ["cleanrl", "sb3", "ppomq"],
        ["sb3", "ppomq", "cleanrl"],
    ]
    learning = bench.plan("learning", ["A-v5", "B-v5"], ["ppomq"], [1, 2], 10)
    assert [(j.seed, j.task) for j in learning] == [
        (1, "A-v5"),
        (1, "B-v5"),
        (2, "A-v5"),
        (2, "B-v5"),
    ]


def test_cleanrl_runs_v4_where_the_others_run_v5() -> None:
    assert bench.env_for("cleanrl", "Hopper-v5") == "Hopper-v4"
    assert bench.env_for("sb3", "Hopper-v5") == "Hopper-v5"
    assert bench.env_for("ppomq", "Hopper-v5") == "Hopper-v5"
    job = bench.Job("side-by-side", "Hopper-v5", "cleanrl", 3, 4096)
    argv = bench.command(job, Path("/r"), bench.Tools(cleanrl_python="/venv/python"))
    assert argv[:3] == ["/venv/python", "-m", "benchmarks.contenders.cleanrl_mujoco"]
    assert argv[argv.index("--env-id") + 1] == "Hopper-v4"


def test_sample_factory_runs_its_mujoco_example_on_v4_without_a_greedy_eval() -> None:
    job = bench.Job("side-by-side", "HalfCheetah-v5", "sf", 1, 4096)
    argv = bench.command(job, Path("/r"), bench.Tools(sf_python="/sf/python"))
    assert argv[:3] == ["/sf/python", "-m", "benchmarks.contenders.sf_mujoco"]
    assert argv[argv.index("--env-id") + 1] == "HalfCheetah-v4"
    assert argv[argv.index("--eval-episodes") + 1] == "0"
    assert "sf" in bench.MODES["side-by-side"]["contenders"]


def test_atari_peers_run_their_atari_runners_each_from_its_own_python() -> None:
    tools = bench.Tools(sf_python="/sf/python", sb3_python="/venv/python")
    sf = bench.command(bench.Job("atari", "BreakoutNoFrameskip-v4", "sf", 1, 10), Path("/r"), tools)
    sb3 = bench.command(
        bench.Job("atari", "BreakoutNoFrameskip-v4", "sb3", 1, 10), Path("/r"), tools
    )
    assert sf[:3] == ["/sf/python", "-m", "benchmarks.contenders.sf_atari"]
    assert sb3[:3] == ["/venv/python", "-m", "benchmarks.contenders.sb3_atari"]
    jobs = bench.plan("atari", ["B"], ["ppomq", "sb3", "sf"], [1, 2], 10)
    assert [j.contender for j in jobs if j.seed == 2] == ["sb3", "sf", "ppomq"]  # rotated


def test_a_missing_sample_factory_venv_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = bench.main([
        "atari", "--contenders", "sf", "--out", str(tmp_path),
        "--sf-python", str(tmp_path / "nope" / "python"),
    ])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "sf_setup.sh" in err


def test_time_to_a_return_is_the_first_time_the_running_mean_reaches_it() -> None:
    rows = [[100, 10.0, 1.0, 1.0], [200, 20.0, 9.0, 5.0], [300, 30.0, 9.0, 6.0]]
    assert bench.time_to(rows, 5.0) == 20.0
    assert bench.time_to(rows, 6.5) is None


def test_atari_goal_compares_wall_with_sb3_and_time_to_return_with_sample_factory(
    tmp_path: Path,
) -> None:
    def atari(contender: str, seed: int, command_s: float, ret: float, t_ret: float) -> dict:
        curve = [
            [1000, 5.0, 0.0, 0.0],
            [500_000, t_ret, ret, ret],
            [1_000_000, command_s, ret, ret],
        ]
        return _rec(contender, seed, command_s, ret, mode="atari", task="Breakout",
                    env_id="Breakout", curve=curve)  # fmt: skip

    runs = [
        atari("ppomq", 1, 1000.0, 30.0, 400.0),
        atari("ppomq", 2, 1200.0, 20.0, 500.0),
        atari("sb3", 1, 3000.0, 20.0, 2000.0),
        atari("sf", 1, 900.0, 10.0, 600.0),
        atari("sf", 2, 1100.0, 12.0, 700.0),
    ]
    paths = bench.save(
        {"mode": "atari", "runs": runs, "invocations": ["x"]}, tmp_path, harness.Run("learning", [])
    )
    assert paths["json"].name == "atari_learning.json"
    md = paths["md"].read_text()
    assert "# Atari side by side" in md
    assert "against SB3: wall 0.33x (goal <= 0.5) met; final return 25.0 vs 20.0 (>=, met)" in md
    # the lower final is SF's mean, 11.0: ppomq reaches it at 400 and 500 s; SF seed 1 never
    # (final 10), seed 2 at 700 s
    assert "to a return of 11.0 (the lower final; median over the seeds that reached it), " in md
    assert "ppomq 450 s (2 of 2 seeds) vs 700 s (1 of 2 seeds)" in md
    assert "(faster: met)" in md


def test_memory_runs_the_same_ppomq_command_with_the_lstm_and_the_mlp(tmp_path: Path) -> None:
    jobs = bench.jobs_from(bench.parse_args(["memory"]))
    assert {(j.contender, j.seed, j.total_steps) for j in jobs} == {
        (c, s, 500_000) for c in ("ppomq-lstm", "ppomq-mlp") for s in (1, 2, 3)
    }
    lstm, mlp = (
        bench.command(bench.Job("memory", "ppomq/MaskedCartPole-v1", c, 2, 500_000), tmp_path,
                      bench.Tools())
        for c in ("ppomq-lstm", "ppomq-mlp")
    )  # fmt: skip
    arch = lstm.index("--arch") + 1
    assert (lstm[arch], mlp[arch]) == ("lstm", "mlp")
    assert lstm[:arch] + lstm[arch + 1 :] == mlp[:arch] + mlp[arch + 1 :]
    assert lstm[lstm.index("--target-return") + 1] == "475"

    def run(contender: str, seed: int, solved: int | None, best: float) -> dict:
        curve = [[1000, 5.0, 20.0, 20.0], [200_000, 60.0, best, best]]
        return _rec(contender, seed, 80.0, best, mode="memory", task="M", env_id="M",
                    total_steps=500_000, curve=curve, solved_at_env_steps=solved)  # fmt: skip

    runs = [run("ppomq-lstm", 1, 200_000, 480.0), run("ppomq-lstm", 2, None, 300.0),
            run("ppomq-mlp", 1, None, 60.0)]  # fmt: skip
    run = harness.Run("learning", [])
    md = bench.save({"mode": "memory", "runs": runs, "invocations": ["x"]}, tmp_path, run)["md"]
    text = md.read_text()
    assert md.name == "masked_cartpole.md"
    assert "- ppomq LSTM: reached 475 in 1 of 2 seeds (at 200,000 env steps)" in text
    assert "- ppomq MLP: reached 475 in 0 of 1 seeds (at no env steps); best running mean" in text


def test_merge_replaces_a_job_and_resume_skips_only_ok_runs() -> None:
    runs = [_rec("ppomq", 1, 100.0, 1.0), _rec("sb3", 1, 100.0, 1.0, ok=False, error="x")]
    jobs = bench.plan("side-by-side", ["HalfCheetah-v5"], ["ppomq", "sb3"], [1], 1_000_000)
    assert [j.contender for j in bench.pending(jobs, runs, resume=True)] == ["sb3"]
    assert len(bench.pending(jobs, runs, resume=False)) == 2
    runs = bench.merge(runs, _rec("sb3", 1, 90.0, 2.0))
    assert len(runs) == 2 and all(r["ok"] for r in runs)
    assert bench.pending(jobs, runs, resume=True) == []


def test_summary_ratios_and_table(tmp_path: Path) -> None:
    doc = {"mode": "side-by-side", "runs": _side_by_side_runs(), "invocations": ["x"]}
    paths = bench.save(doc, tmp_path, harness.Run("learning", []))
    assert set(paths) == {"json", "md", "png"}
    (entry,) = json.loads(paths["json"].read_text())["summary"]
    assert list(entry["contenders"]) == ["ppomq", "cleanrl", "sb3"]  # ppomq first
    p, c = entry["contenders"]["ppomq"], entry["contenders"]["cleanrl"]
    assert p["command_s"] == 110.0 and c["command_s"] == 250.0  # medians over seeds
    assert p["mean_return_20"] == 1600.0 and c["env_id"] == ["HalfCheetah-v4"]
    r = entry["ratios"]["ppomq/cleanrl"]
    assert r["ratio_of_medians"] == pytest.approx(110 / 250, abs=1e-3)
    assert r["median_per_seed"] == pytest.approx((100 / 300 + 120 / 200) / 2, abs=1e-3)
    assert r["pairs"] == 2
    md = paths["md"].read_text()
    assert "| ppomq | HalfCheetah-v5 | 2 | 110.0 | 105.0 |" in md
    assert "| ppomq | – | 0.47x (0.44x) | 0.46x (0.46x) |" in md
    # 2x faster than both; return above CleanRL's, below SB3's (1600 < 1700)
    assert "against CleanRL: wall 0.47x (goal <= 0.5) met; final return 1,600 vs 1,425 (>=" in md
    assert "against SB3: wall 0.46x (goal <= 0.5) met; final return 1,600 vs 1,700 (below)" in md
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_learning_table_holds_ppomq_against_the_published_figure(tmp_path: Path) -> None:
    runs = [
        _rec("ppomq", s, 300.0, ret, mode="learning", task="Hopper-v5", env_id="Hopper-v5")
        for s, ret in ((1, 2500.0), (2, 2100.0))
    ]
    md = bench.render_markdown({"mode": "learning", "runs": runs, "summary": bench.summarise(runs)})
    assert "Hopper-v4, about 2,380): ppomq's final return 2,300 < 2,380" in md
    assert "greedy eval 2,310 < 2,380" in md


def _write_ppomq_run_dir(run_dir: Path, started: float, total: int) -> None:
    """What `ppomq train` leaves: summary.json, episodes.csv, progress.csv (learner clock)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    summary = {
        "env_id": "HalfCheetah-v5",
        "mode": "async",
        "actors": 2,
        "total_env_steps": total,
        "wall_seconds": 9.0,
        "started_unix": started,
        "resumed_wall_s": 0.0,
        "final_mean_return_20": -5.0,
        "final_eval_return": 7.0,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with open(run_dir / "episodes.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["env_steps", "wall_s", "return", "length"])
        w.writerows([[total // 2, "1.000", -10.0, 1000], [total, "4.000", 0.0, 1000]])
    with open(run_dir / "progress.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["version", "wall_s"])
        w.writerows([[1, "2.5"], [2, "5.0"]])


def test_collect_ppomq_turns_the_learner_clock_into_command_time(tmp_path: Path) -> None:
    _write_ppomq_run_dir(tmp_path, started=T0 + 2.0, total=2000)
    got = bench.collect_ppomq(tmp_path, T0)
    assert got["to_n_steps_s"] == 7.0  # learner start 2 s after the command + last update at 5
    assert got["sps"] == round(2000 / 7.0, 1)
    assert got["mean_return_20"] == -5.0 and got["eval_return"] == 7.0
    assert got["curve"] == [[1000, 3.0, -10.0, -10.0], [2000, 6.0, 0.0, -5.0]]


def test_collect_peer_reads_its_result_file(tmp_path: Path) -> None:
    log = EpisodeLog()
    for i in range(25):
        log.add(1000 * (i + 1), float(i), unix=T0 + 3 + i)
    doc = {"contender": "sb3", "env_id": "HalfCheetah-v5", "env_steps": 25_000,
           "first_step_unix": T0 + 3, "train_end_unix": T0 + 28, "episodes": log.rows,
           "mean_return_20": log.mean_last(), "eval_return": 1.0, "torch_threads": 2}  # fmt: skip
    write_result(tmp_path, doc)
    got = bench.collect_peer(tmp_path, T0)
    assert got["mean_return_20"] == sum(range(5, 25)) / 20
    assert got["to_n_steps_s"] == 28.0 and got["startup_s"] == 3.0
    assert got["curve"][-1] == [25_000, 27.0, 24.0, 14.5]  # mean of returns 5..24


def test_thin_keeps_the_last_point() -> None:
    rows = list(range(1234))
    out = bench.thin(rows, 100)
    assert len(out) == 100 and out[0] == 0 and out[-1] == 1233


def _main(tmp_path: Path, ppomq_cmd: str) -> int:
    return bench.main([
        "side-by-side", "--contenders", "ppomq", "--seeds", "1", "--total-steps", "2000",
        "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work"),
        "--lock", str(tmp_path / "lock"), "--ppomq-cmd", ppomq_cmd,
    ])  # fmt: skip


def test_main_records_each_run_and_resumes(tmp_path: Path) -> None:
    assert _main(tmp_path, "false") == 1  # a failed run is recorded, not lost
    doc_path = tmp_path / "out" / "mujoco_side_by_side.json"
    (rec,) = json.loads(doc_path.read_text())["runs"]
    assert not rec["ok"] and rec["error"].startswith("exit 1")
    assert len(rec["load_before"]) == 3 and len(rec["load_after"]) == 3
    fake = f"{sys.executable} -m tests.benchmarks.test_learning_smoke {{run_dir}} {{total_steps}}"
    assert _main(tmp_path, fake) == 0  # the failed run is run again
    (rec,) = json.loads(doc_path.read_text())["runs"]
    assert rec["ok"] and rec["env_steps"] == 2000 and rec["command_s"] > 0
    assert _main(tmp_path, "false") == 0  # recorded as ok: skipped, `false` never runs
    doc = json.loads(doc_path.read_text())
    assert len(doc["runs"]) == 1 and doc["runs"][0]["ok"] and len(doc["invocations"]) == 3
    assert (tmp_path / "out" / "mujoco_side_by_side.md").exists()


def test_a_missing_cleanrl_venv_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = bench.main([
        "side-by-side", "--contenders", "cleanrl", "--out", str(tmp_path),
        "--cleanrl-python", str(tmp_path / "nope" / "python"),
    ])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cleanrl_setup.sh" in err


if __name__ == "__main__":  # the fake `ppomq train` of test_main_records_each_run_and_resumes
    import time

    _write_ppomq_run_dir(Path(sys.argv[1]), started=time.time(), total=int(sys.argv[2]))


def test_the_sample_factory_goal_is_judged_for_each_ppomq_contender_on_median_and_mean() -> None:
    runs = [
        *(_rec("ppomq", s, 140.0, r) for s, r in ((1, 1700.0), (2, 1800.0), (3, 3800.0))),
        *(_rec("ppomq-fast", s, 36.0, r) for s, r in ((1, 1500.0), (2, 1600.0), (3, 1450.0))),
        *(_rec("sf", s, 100.0, r) for s, r in ((1, 1480.0), (2, 1330.0), (3, 3000.0))),
    ]
    entry = bench.summarise(runs)[0]
    lines = bench._sf_goal_lines(entry)
    ppomq = next(x for x in lines if x.startswith("- ppomq:"))
    fast = next(x for x in lines if x.startswith("- ppomq mujoco-fast:"))
    assert "1.40x" in ppomq and "not faster" in ppomq
    assert "median 1,800 vs 1,480 (>=, met)" in ppomq
    assert "0.36x" in fast and "faster, met" in fast
    # Above Sample Factory's median, below its mean (one seed found the fast gait).
    assert "median 1,500 vs 1,480 (>=, met)" in fast and "mean 1,517 vs 1,937 (below)" in fast
    # The issue-13 goal compares ppomq with its peers, not with its own variants.
    goals = bench._goal_lines(entry)
    sf_goals = goals[: goals.index("Goal, against Sample Factory:")]
    assert any("Sample Factory" in x for x in sf_goals)
    assert not any("mujoco-fast" in x for x in sf_goals)
