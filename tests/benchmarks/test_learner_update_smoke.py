"""Smoke: the learner-update benchmark times every engine on every case and writes
well-formed JSON and Markdown. Speed-ups are not asserted (timing belongs to the benchmark)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import learner_update


@pytest.mark.slow  # times every engine on every case (--quick)
def test_quick_run_writes_json_and_markdown(tmp_path):
    learner_update.main(["--quick", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "learner_update.json").read_text())
    assert set(doc["cases"]) == {name for name, *_ in learner_update.CASES}
    for case in doc["cases"].values():
        assert set(case["engines"]) == set(learner_update.ENGINES)
        for e in case["engines"].values():
            assert e["update_ms_min"] <= e["update_ms_median"] <= e["update_ms_max"]
            assert e["sgd_step_us_median"] > 0 and math.isfinite(e["speedup_vs_baseline"])
        assert case["engines"][learner_update.BASELINE]["speedup_vs_baseline"] == 1.0
    md = (tmp_path / "learner_update.md").read_text()
    assert md.count("| analytic |") == len(learner_update.CASES)
