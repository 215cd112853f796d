"""Smoke: `python -m benchmarks.flood --quick` runs a real system through its four windows
(unharmed, control, flood, valid-flood) and writes well-formed JSON and Markdown. Rates are not
asserted (timing belongs to the benchmark)."""

from __future__ import annotations

import json

import pytest

from benchmarks import flood

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_quick_run_writes_json_and_markdown(tmp_path):
    flood.main(["--quick", "--curve", "off", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "flood.json").read_text())
    assert sorted(w["mode"] for w in doc["windows"]) == sorted(flood.MODES)
    by_mode = {w["mode"]: w for w in doc["windows"]}
    assert by_mode["flood"]["sent"] > 0
    # Counted as rejects, none accepted; libzmq may drop the last few a PUSH socket holds
    # at its close (src/ppomq/core/transport/rollouts.py), so not more than were sent, and not many
    # fewer.
    assert by_mode["flood"]["sent"] - 64 <= by_mode["flood"]["learner_counted"]
    assert by_mode["flood"]["learner_counted"] <= by_mode["flood"]["sent"]
    assert by_mode["control"]["learner_counted"] == by_mode["unharmed"]["learner_counted"] == 0
    # Valid batches: what the learner trained or dropped of them, never more than was sent.
    valid = by_mode["valid-flood"]
    assert valid["sent"] > 0
    assert 0 < valid["flooder_accepted"] + valid["flooder_surplus"] <= valid["sent"]
    s = doc["summary"]["off"]
    assert set(s["updates_per_s_median"]) == set(flood.MODES)
    md = (tmp_path / "flood.md").read_text()
    table, windows = md.split("Every window")
    # One row in each summary table (junk, valid batches); one per window.
    assert table.count("| off |") == 2 and windows.count("| off |") == len(flood.MODES)
