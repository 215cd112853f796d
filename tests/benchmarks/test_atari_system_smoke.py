"""benchmarks/atari_system.py's report from its runs (the runs themselves take minutes)."""

from __future__ import annotations

from benchmarks.atari_system import markdown, result_stem, summarise


def test_rows_are_medians_per_actor_count_and_every_run_is_listed():
    runs = [
        {"actors": a, "torch_threads": 1, "sps": sps, "env_steps": 1000, "versions": 3,
         "learner_wait_share": w, "sgd_s_per_update": 1.5, "command_s": 50.0,
         "load1_before": 0.5}
        for a, sps, w in [(1, 180.0, 0.3), (1, 200.0, 0.2), (2, 300.0, 0.1), (2, 320.0, 0.05)]
    ]  # fmt: skip
    rows = summarise(runs)
    assert [r["actors"] for r in rows] == [1, 2]
    assert rows[0]["sps_median"] == 190.0 and rows[0]["sps_range"] == [180.0, 200.0]
    assert abs(rows[1]["learner_wait_share_median"] - 0.075) < 1e-12
    machine = {"cpus": 2, "cpu_model": "cpu", "platform": "linux", "python": "3"}
    doc = {"command": "x", "machine": machine, "date": "d", "duration_s": 45.0, "torch_threads": 1,
           "repeats": 2, "rows": rows, "runs": runs}  # fmt: skip
    md = markdown(doc)
    assert "| 1 | 190 (180–200) | 25% |" in md
    assert md.count("\n| 2 | ") == 3  # one summary row, two runs


def test_each_thread_count_writes_its_own_current_result():
    assert result_stem(1) == "atari_system"
    assert result_stem(2) == "atari_system_threads2"
