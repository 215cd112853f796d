"""The compose scaling benchmark's figures, read from a finished run's files (the compose
runs themselves need a Docker engine and belong to the benchmark, not to these tests)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import compose_scaling as cs
from benchmarks import harness


def _summary(**over: object) -> dict[str, object]:
    s: dict[str, object] = {
        "actors": 8, "total_env_steps": 30_208, "discarded_env_steps": 86_528,
        "trained_samples": 30_208, "wall_seconds": 37.91, "sps": 796.8,
        "batches_produced": 456, "batches_accepted": 118, "batches_surplus": 338,
        "waste_ratio": 0.7412, "learner_time_s": {"sgd": 22.8, "wait": 6.6},
    }  # fmt: skip
    s.update(over)
    return s


def test_steady_rate_runs_from_the_middle_update_to_the_last(tmp_path: Path) -> None:
    progress = tmp_path / "progress.csv"
    rows = ["version,env_steps,wall_s,charts/SPS"]
    # a slow start (10 s for the first 256 steps), then 256 steps every 0.1 s
    rows += [f"{v},{256 * v},{10 + 0.1 * (v - 1):.3f},0" for v in range(1, 11)]
    progress.write_text("\n".join(rows) + "\n")
    assert cs.steady_sps(progress) == 2560.0
    progress.write_text("\n".join(rows[:3]) + "\n")
    assert cs.steady_sps(progress) is None  # too few updates to leave the start-up out


def test_the_table_counts_every_batch_received_as_sampled_and_only_accepted_as_trained() -> None:
    run = {"exit_s": 58.25, "summary": cs.brief(_summary(), steady=1044.0)}
    assert run["summary"]["trained_samples_per_s"] == 796.8
    assert cs.sampled_sps(run["summary"]) == round((30_208 + 86_528) / 37.91, 1)
    doc = {"runs": {"8": [run]}, "meta": {
        "command": "python -m benchmarks.compose_scaling", "machine": harness.machine(),
        "commit": "abc1234", "engine": "Docker engine 20.10", "image": "ppomq:latest",
        "rounds": 1, "total_steps": 30_000, "loadavg_before": [1, 1, 1],
        "loadavg_after": [1, 1, 1]}}  # fmt: skip
    md = cs.markdown(doc)
    assert "| 8 | 8 | 3,079 | 797 | 1,044 | 797 | 74.1 % | 456 / 118 / 338 | 58.2 |" in md
    assert "one round (one run per N)" in md


def test_an_appended_round_joins_each_ns_runs_and_keeps_the_earlier_record() -> None:
    meta = {"rounds": 1, "loadavg_before": [1, 1, 1], "orders": [["1", "8"]]}
    earlier = {"run": {"started_utc": "a"}, "runs": {"1": ["r1"], "8": ["r8"]}, "meta": meta}
    later = {"runs": {"8": ["s8"], "1": ["s1"]},
             "meta": {**meta, "loadavg_before": [2, 2, 2], "orders": [["8", "1"]]}}  # fmt: skip
    doc = cs.merge(earlier, later)
    assert doc["runs"] == {"1": ["r1", "s1"], "8": ["r8", "s8"]}
    assert doc["meta"]["rounds"] == 2 and doc["meta"]["orders"] == [["1", "8"], ["8", "1"]]
    assert doc["meta"]["loadavg_before"] == [1, 1, 1]
    assert doc["run"] == {"started_utc": "a"}  # stamped into earlier_runs when written
