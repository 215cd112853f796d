"""The GPU machine's Atari script (benchmarks/device/atari.sh): the fleet's arms, the
actors' own time read from their exit lines, the 10M projection, and the one page its
results make (benchmarks.device.report)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.device import atari_fleet as fleet
from benchmarks.device import report


def _argv(arm: str) -> list[str]:
    args = argparse.Namespace(device="cuda", fleet_actors=14, duration_s=50.0)
    return fleet.train_argv(arm, 2, args, Path("/r"))


def test_the_preset_arm_is_the_preset_and_the_fleet_keeps_four_minibatches() -> None:
    preset = _argv("preset")
    assert preset[preset.index("--preset") + 1] == "atari"
    assert preset[preset.index("--env-backend") + 1] == "ale"
    assert preset[preset.index("--device") + 1] == "cuda"
    assert preset[preset.index("--batches-per-version") + 1] == "2"
    assert "--num-envs" not in preset and "--minibatch-size" not in preset
    flags = fleet.arm_flags("fleet", 14)
    assert flags[flags.index("--actors") + 1] == "14"
    # 14 actors x 8 envs x 128 steps per update, in CleanRL's 4 minibatches.
    assert int(flags[flags.index("--minibatch-size") + 1]) * 4 == 14 * 8 * 128


def test_the_actor_share_is_the_median_actors_exit_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for i, (s, w) in enumerate([(20.0, 78.0), (30.0, 68.0), (90.0, 8.0)]):
        (logs / f"actor-{i}.log").write_text(
            "12:00:00 actor INFO started\n"
            f"12:01:00 actor INFO actor a{i} time: sample {s}%, weights {w}%, send 2.0% of 9 s\n"
        )
    assert fleet.actor_share(tmp_path) == {"sample": 0.3, "weights": 0.68, "send": 0.02}
    assert fleet.actor_share(tmp_path / "none") is None


def test_the_projection_is_start_up_plus_ten_million_steps_at_the_steady_rate() -> None:
    assert fleet.projection({"steady_sps": 10_000.0, "startup_s": 60.0}) == round(
        (60 + 1000) / 60, 1
    )
    assert fleet.projection({"steady_sps": None}) is None


def test_the_page_holds_each_part_and_says_what_did_not_run(tmp_path: Path) -> None:
    (tmp_path / "atari_fleet.md").write_text("# The fleet\n\n| a |\n\n# Sub\ntext\n")
    text = report.page(tmp_path, "Atari", "bash x.sh", ["cuda_update:the CNN update",
                       "atari_fleet:the whole system"], "not run: no GPU", quick=False)  # fmt: skip
    assert "## (a) The CUDA tests" in text and "not run: no GPU." in text
    assert "## (b) the CNN update: not run" in text
    assert "## (c) The fleet" in text and "\n## Sub" in text
