"""benchmarks/puffer_tax.py: its report from runs (no training), the layouts it runs, and a
quick real run against PufferLib when its venv is there (asserting that it runs and writes
well-formed results, never how fast anything was)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from benchmarks import puffer_tax as bench

REPO = Path(__file__).resolve().parents[2]
PUFFER_PYTHON = str(bench.PUFFER_VENV / "bin" / "python")


def _run(name: str, r: int, sps: float, length: float, **extra: object) -> dict:
    rec = {"contender": name, "round": r, "ok": True, "command_s": 2e6 / sps + 5,
           "sps": sps, "sps_steady": sps * 1.1, "startup_s": 3.0, "env_steps": 2_000_000,
           "final_length": length, "length_at_1m": length - 20}  # fmt: skip
    rec.update(extra)
    return rec


def _ppomq(name: str, r: int, sps: float) -> dict:
    split = {"learner_ms_per_update": {"wait": 600.0, "targets": 3.0, "sgd": 250.0,
                                       "publish": 8.0},
             "actor_ms_per_batch": {"sample": 800.0, "weights": 30.0, "send": 5.0},
             "batches_rejected": {"stale": 1}}  # fmt: skip
    return _run(name, r, sps, 170.0, ppomq=split)


def _puffer(r: int, sps: float) -> dict:
    return _run(bench.BASELINE, r, sps, 180.0, puffer={
        "ms_per_epoch": {"evaluate": 150.0, "train": 260.0}, "policy": "MatchedMLP"})  # fmt: skip


def test_every_ppomq_layout_keeps_pufferlibs_update_size() -> None:
    for shape in (bench.Shape(), bench.QUICK):
        for c in bench.CONTENDERS.values():
            if c.kind == "ppomq":
                envs, steps = c.ppomq_layout(shape)
                assert envs * steps * c.actors == shape.batch, c.name


def test_rows_are_medians_with_pufferlibs_sps_over_each() -> None:
    runs = [_puffer(0, 120_000.0), _puffer(1, 160_000.0), _puffer(2, 140_000.0),
            _ppomq("ppomq-1x1024-ahead", 0, 70_000.0), _ppomq("ppomq-1x1024-ahead", 1, 80_000.0),
            _ppomq("ppomq-1x1024-ahead", 2, 60_000.0),
            {"contender": "ppomq-2x512", "round": 0, "ok": False, "command_s": 1.0,
             "error": "exit 1"}]  # fmt: skip
    names = [bench.BASELINE, "ppomq-1x1024-ahead", "ppomq-2x512"]
    rows = bench.summarise(runs, names)
    base, ahead, failed = rows
    assert base["sps"] == {"median": 140_000.0, "min": 120_000.0, "max": 160_000.0}
    assert base["puffer_sps_over_this"] == 1.0
    assert ahead["puffer_sps_over_this"] == 2.0  # 140k / 70k
    assert ahead["learner_ms_per_update"]["sgd"] == 250.0 and ahead["rejected"] == 3
    assert failed["runs"] == 0 and failed["failed"] == 1
    doc = {"command": "python -m benchmarks.puffer_tax", "date": "d", "rounds": 3, "seed": 1,
           "machine": {"cpus": 2, "cpu_model": "cpu", "platform": "linux", "python": "3"},
           "load_before": [1, 1, 1], "load_after": [2, 2, 2],
           "shape": {"num_envs": 1024, "horizon": 64, "minibatch_size": 32768,
                     "total_steps": 2_000_000}, "rows": rows, "profile": None}  # fmt: skip
    md = bench.markdown(doc)
    assert (
        "**Goal** (ppomq within 1.5× of PufferLib's SPS at its batch shape), one Gymnasium "
        "env each (`--vectorization sync`, the default): not met: the fastest layout, "
        "ppomq, 1 actor x 1,024 envs, T=64, 2 batches/version, makes PufferLib's SPS 2.00× "
        "its own." in md
    )
    assert "`--vectorization vector_entry_point`): " not in md  # no such row ran
    assert "| 70,000 (60,000–80,000) |" in md
    assert "| 600 | 3 | 250 | 8 | 800 | 30 | 5 |" in md


def _flags(argv: list[str]) -> dict[str, str | None]:
    """--flag value pairs (None for a bare switch) as a dict."""
    out: dict[str, str | None] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else "--"
            out[a] = None if nxt.startswith("--") else nxt
    return out


def test_the_two_host_layout_runs_trains_learner_and_actor_flags_split_over_hosts(
    tmp_path: Path,
) -> None:
    one = bench.CONTENDERS["ppomq-1x1024-ahead-cvec"]
    two = bench.CONTENDERS["ppomq-1x1024-ahead-cvec-2hosts"]
    train = bench.ppomq_command(one, bench.Shape(), 1, tmp_path)
    split = bench.ppomq_command(two, bench.Shape(), 1, tmp_path)
    assert split[1:3] == ["-m", "benchmarks.deploy.split_run"]
    learner = shlex.split(split[split.index("--learner-args") + 1])
    actor = shlex.split(split[split.index("--actor-args") + 1])
    flags = _flags(train[2:])  # after the executable and `train`
    train_only = {"--actors": "1", "--no-progress": None, "--run-dir": str(tmp_path)}
    assert _flags(learner) | _flags(actor) | train_only == flags
    assert "--vectorization" in actor and "--batch-samples" in learner
    row = {"contender": two.name, "label": two.label, "puffer_sps_over_this": 1.4,
           "sps": {"median": 1.0, "min": 1.0, "max": 1.0}}  # fmt: skip
    doc = {"command": "c", "date": "d", "rounds": 1, "seed": 1, "rows": [row],
           "machine": {"cpus": 2, "cpu_model": "cpu", "platform": "linux", "python": "3"},
           "load_before": [1, 1, 1], "load_after": [1, 1, 1], "profile": None,
           "shape": {"num_envs": 1024, "horizon": 64, "minibatch_size": 32768,
                     "total_steps": 2_000_000}}  # fmt: skip
    md = bench.markdown(doc)
    assert "(ppomq on two network hosts faster than PufferLib on one): not met" in md
    assert "**Goal** (ppomq within 1.5×" not in md  # a two-host row is not a one-box layout


def test_mean_length_weights_by_episode_count() -> None:
    eps = [(100, 10.0, 1), (950, 100.0, 3), (990, 200.0, 1)]
    assert bench.mean_length(eps, 900, float("inf")) == 125.0  # (3 x 100 + 200) / 4
    assert bench.mean_length(eps, 0, 50) is None


def test_a_missing_pufferlib_venv_is_one_line(tmp_path: Path, capsys) -> None:
    code = bench.main(["--puffer-python", str(tmp_path / "none" / "python"), "--lock", ""])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "benchmarks/contenders/puffer_setup.sh" in err


@pytest.mark.slow
def test_quick_run_writes_well_formed_results(tmp_path: Path) -> None:
    why = bench.puffer_ready(PUFFER_PYTHON)
    if why:
        pytest.skip(f"PufferLib is not set up: {why}")
    code = bench.main(["--quick", "--rounds", "1", "--contenders",
                       "pufferlib-matched,ppomq-1x1024-ahead", "--profile-batches", "1",
                       "--out", str(tmp_path), "--lock", ""])  # fmt: skip
    doc = json.loads((tmp_path / "puffer_tax.json").read_text())
    assert code == 0, [r.get("error") for r in doc["runs"]]
    assert [r["contender"] for r in doc["rows"]] == ["pufferlib-matched", "ppomq-1x1024-ahead"]
    for row in doc["rows"]:
        assert row["runs"] == 1 and row["sps"]["median"] > 0
    assert doc["profile"]["learner_ms"]["sgd"] > 0
    assert "## ppomq's path, part by part" in (tmp_path / "puffer_tax.md").read_text()
