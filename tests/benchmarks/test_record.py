"""The record every benchmark result file carries (benchmarks/record.py), and that every
benchmark writes its results through the one writer that adds it."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from benchmarks import harness, record

BENCHMARKS = Path(harness.__file__).resolve().parent
# JSON writes that are not results, by file: each rank's timings, read back by its parent.
NOT_RESULTS = {"group_update.py": 1}


def _written(tmp_path: Path, doc: dict, run: harness.Run) -> dict:
    harness.write_results(tmp_path, "x", doc, "# x\n", run)
    return json.loads((tmp_path / "x.json").read_text())


def test_write_results_fills_every_record_field(tmp_path: Path) -> None:
    run = harness.Run("e2e", ["--seeds", "5"])
    run.peer("stable-baselines3", "2.9.2")
    doc = _written(tmp_path, {"figure": 0.65}, run)
    assert record.missing_fields(doc) == []
    rec = doc["run"]
    assert set(record.FIELDS) <= set(rec)
    assert rec["command"] == "python -m benchmarks.e2e --seeds 5"
    assert re.fullmatch(r"[0-9a-f]{7,40}", rec["commit"])  # the hash alone, no "+dirty"
    assert isinstance(rec["tree_clean"], bool)
    assert set(record.MACHINE_FIELDS) <= set(rec["machine"]) and rec["machine"]["cpus"] >= 1
    for load in (rec["load_before"], rec["load_after"]):
        assert len(load) == 3 and all(isinstance(x, float | int) for x in load)
    assert rec["versions"]["stable-baselines3"] == "2.9.2"
    assert rec["versions"]["python"] and rec["versions"]["torch"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["date_utc"])
    assert doc["figure"] == 0.65  # the figures beside the record, untouched


def test_missing_fields_names_what_a_legacy_result_lacks() -> None:
    assert record.missing_fields({"machine": {"cpus": 2}}) == ["run"]
    run = harness.Run("scaling", []).record()
    run["load_before"] = None
    run["versions"]["torch"] = None
    run["versions"]["pufferlib"] = None  # a peer that ran but whose version is unknown
    assert record.missing_fields({"run": run}) == [
        "run.load_before", "run.versions.torch", "run.versions.pufferlib",
    ]  # fmt: skip


def test_a_second_invocation_keeps_the_first_ones_record(tmp_path: Path) -> None:
    first = _written(tmp_path, {"runs": [1]}, harness.Run("learning", ["atari", "--seeds", "1"]))
    second_run = harness.Run("learning", ["atari", "--seeds", "2"])
    second_run.started_utc = "2999-01-01T00:00:00Z"  # a later invocation
    second = _written(tmp_path, {**first, "runs": [1, 2]}, second_run)
    assert second["run"]["command"].endswith("--seeds 2")
    assert [r["command"] for r in second["earlier_runs"]] == [first["run"]["command"]]
    again = _written(tmp_path, second, second_run)  # the same invocation saving again
    assert len(again["earlier_runs"]) == 1


def test_the_writer_needs_a_run() -> None:
    with pytest.raises(TypeError):
        harness.write_json(Path("/nonexistent/x.json"), {})  # type: ignore[call-arg]


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) == name
    ]  # fmt: skip


@pytest.mark.parametrize(
    "path",
    sorted(p for p in BENCHMARKS.rglob("*.py") if "contenders" not in p.parts),
    ids=lambda p: str(p.relative_to(BENCHMARKS)),
)
def test_every_benchmark_writes_json_through_the_record_writer(path: Path) -> None:
    """No result file is written around the record: JSON goes to a file only through
    harness.write_json/write_results (the contenders' run-dir files and stdout aside)."""
    if path.name in ("harness.py", "record.py"):
        return
    rel = str(path.relative_to(BENCHMARKS))
    tree = ast.parse(path.read_text())
    for call in _calls(tree, "dump"):
        pytest.fail(f"{path.name}:{call.lineno} json.dump to a file")
    json_writes = [
        call.lineno for call in _calls(tree, "write_text")
        if any(getattr(c.func, "attr", "") == "dumps" for c in ast.walk(call)
               if isinstance(c, ast.Call))
    ]  # fmt: skip
    assert len(json_writes) <= NOT_RESULTS.get(rel, 0), (
        f"{rel}: lines {json_writes} write JSON around the record"
    )


def test_the_tree_is_judged_as_the_run_started_not_as_its_results_changed_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A benchmark rewrites its tracked result files as it goes: judged at writing time,
    every record of a run from a clean tree said "not clean"."""
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)  # fmt: skip

    git("init", "-q")
    (tmp_path / "result.json").write_text("{}")
    git("add", "result.json")
    git("commit", "-q", "-m", "x")
    monkeypatch.setattr(record, "REPO", tmp_path)
    run = record.Run("e2e", [])
    (tmp_path / "result.json").write_text('{"figure": 1}')  # the run's own result file
    rec = run.record()
    assert rec["tree_clean"] is True and rec["commit"]
    assert record.Run("e2e", []).tree_clean is False  # a run started from this tree is not
