"""benchmarks/atari_system.py's report from its runs (the runs themselves take minutes)."""

from __future__ import annotations

import pytest

from benchmarks.atari_system import main, markdown, result_stem, summarise

MACHINE = {"cpus": 2, "cpu_model": "cpu", "platform": "linux", "python": "3"}


def _run(actors, sps, wait, backend=None, share=None):
    run = {"actors": actors, "torch_threads": 1, "sps": sps, "env_steps": 1000, "versions": 3,
           "learner_wait_share": wait, "learner_sgd_share": 1 - wait, "sgd_s_per_update": 1.5,
           "command_s": 50.0, "load1_before": 0.5, "actor_share": share}  # fmt: skip
    if backend:
        run["env_backend"] = backend
    return run


def _doc(runs):
    return {"command": "x", "machine": MACHINE, "date": "d", "duration_s": 45.0,
            "torch_threads": 1, "repeats": 2, "rows": summarise(runs), "runs": runs}  # fmt: skip


def test_rows_are_medians_per_actor_count_and_every_run_is_listed():
    runs = [_run(a, sps, w) for a, sps, w in [(1, 180.0, 0.3), (1, 200.0, 0.2), (2, 300.0, 0.1),
                                              (2, 320.0, 0.05)]]  # fmt: skip
    rows = summarise(runs)
    assert [(r["actors"], r["env_backend"]) for r in rows] == [(1, "gymnasium"), (2, "gymnasium")]
    assert rows[0]["sps_median"] == 190.0 and rows[0]["sps_range"] == [180.0, 200.0]
    assert abs(rows[1]["learner_wait_share_median"] - 0.075) < 1e-12
    md = markdown(_doc(runs))
    assert "| 1 | gymnasium | 190 (180–200) | 25% | 75% |" in md
    assert md.count("\n| 2 | ") == 3  # one summary row, two runs


def test_each_backend_gets_its_own_row_per_actor_count_with_the_actors_time_split():
    ale = {"sample": 0.5, "weights": 0.45, "send": 0.05}
    gym = {"sample": 0.8, "weights": 0.15, "send": 0.05}
    runs = [_run(2, 230.0, 0.05, "gymnasium", gym), _run(2, 260.0, 0.10, "ale", ale),
            _run(2, 250.0, 0.05, "gymnasium", gym), _run(2, 280.0, 0.20, "ale", ale)]  # fmt: skip
    rows = summarise(runs)
    assert [(r["actors"], r["env_backend"], r["sps_median"]) for r in rows] == [
        (2, "gymnasium", 240.0),
        (2, "ale", 270.0),
    ]
    assert rows[1]["actor_share_median"] == ale
    md = markdown(_doc(runs))
    assert "| 2 | ale | 270 (260–280) | 15% | 85% | 1.50 | 50% / 45% / 5% | 50.0 |" in md
    assert "| 2 | gymnasium | 240 (230–250) | 5% | 95% | 1.50 | 80% / 15% / 5% | 50.0 |" in md
    assert md.count("\n| 2 | ale | ") == 3  # one summary row, two runs


def test_an_unknown_env_backend_stops_before_any_run(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--env-backend", "gymnasium,cpp"])
    assert stop.value.code == 2
    assert "--env-backend cpp: choose from gymnasium, ale, envpool" in capsys.readouterr().err


def test_each_thread_count_writes_its_own_current_result():
    assert result_stem(1) == "atari_system"
    assert result_stem(2) == "atari_system_threads2"
