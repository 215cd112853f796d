"""Smoke: the CNN-update benchmark times both input layouts and writes well-formed JSON and
Markdown; its baseline model computes what the learner's does. Speed-ups are not asserted
(timing belongs to the benchmark)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import cnn_update
from ppomq.core.models.cnn import NatureCNN


def test_the_nchw_baseline_is_the_same_network_in_another_layout():
    torch.manual_seed(0)
    model = NatureCNN(cnn_update.SPEC)
    baseline = cnn_update.NCHWNatureCNN(cnn_update.SPEC)
    baseline.load_state_dict(model.state_dict())
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        torch.testing.assert_close(baseline.features(obs), model.features(obs),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip


@pytest.mark.slow  # four Nature CNN updates of 256 frames (--quick)
def test_quick_run_writes_json_and_markdown(tmp_path):
    cnn_update.main(["--quick", "--threads", "1", "--out", str(tmp_path), "--lock", ""])
    doc = json.loads((tmp_path / "cnn_update.json").read_text())
    assert [(r["threads"], r["format"]) for r in doc["rows"]] == [
        (1, fmt) for fmt in cnn_update.FORMATS
    ]
    for row in doc["rows"]:
        assert row["update_s_min"] <= row["update_s_median"] <= row["update_s_max"]
    assert doc["rows"][0]["speedup_vs_baseline"] == 1.0
    md = (tmp_path / "cnn_update.md").read_text()
    assert "| 1 | channels-last |" in md and "| 1 | nchw |" in md
