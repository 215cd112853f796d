"""`python -m benchmarks.group_update` end to end on one tiny round: a learner alone and a
group of two real gloo processes run the CartPole update; the result files carry one row
per W with finite figures. Speedups are not asserted (timing belongs to the benchmark)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import group_update


@pytest.mark.slow
def test_one_round_writes_a_row_per_world_size(tmp_path):
    out = tmp_path / "group_update"
    assert group_update.main(
        ["--world", "1,2", "--cases", "cartpole", "--rounds", "1", "--updates", "1",
         "--out", str(out)]
    ) == 0  # fmt: skip
    doc = json.loads(out.with_suffix(".json").read_text())
    rows = {r["world"]: r for r in doc["rows"]}
    assert set(rows) == {1, 2}
    assert rows[1]["allreduce_ms"] == 0  # a learner alone has no collectives
    assert rows[2]["allreduce_ms"] > 0
    assert all(math.isfinite(r["update_ms"]) and r["update_ms"] > 0 for r in rows.values())
    assert "| cartpole | 2 |" in out.with_suffix(".md").read_text()


def test_the_baseline_world_size_is_required():
    with pytest.raises(SystemExit):
        group_update.main(["--world", "2,4"])
