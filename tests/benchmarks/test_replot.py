"""The committed plots read at the docs site's width, and can be re-drawn from their JSON
(benchmarks/replot.py, benchmarks/plot_style.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from benchmarks import harness, plot_style, replot

PNGS = sorted(replot.RESULTS.rglob("*.png"))
# The docs theme's content column at a 1280-px window, and the least text size there.
SHOWN_PX = 700
LEAST_TEXT_PX = 10


def _png_width(path: Path) -> int:
    return struct.unpack(">I", path.read_bytes()[16:20])[0]


@pytest.mark.parametrize("png", PNGS, ids=lambda p: str(p.relative_to(replot.RESULTS)))
def test_each_committed_plot_has_its_json_and_a_benchmark_that_draws_it(png: Path) -> None:
    source = png.with_suffix(".json")
    assert source.is_file(), f"{png.name} has no {source.name} to re-draw it from"
    assert replot.plotter(json.loads(source.read_text())) is not None


@pytest.mark.parametrize("png", PNGS, ids=lambda p: str(p.relative_to(replot.RESULTS)))
def test_each_committed_plot_is_drawn_at_the_width_its_text_sizes_are_set_for(png: Path) -> None:
    want = int(plot_style.FIG_WIDTH_IN * plot_style.DPI)
    assert _png_width(png) == want, f"{png.name}: run python -m benchmarks.replot"


@pytest.mark.parametrize(
    "name", ["mujoco_side_by_side", "e2e", "e2e_rllib/e2e", "scaling", "variants_objective"]
)
def test_plots_keep_legends_off_the_curves_and_text_legible_in_the_docs(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Any] = []

    def keep(fig: Any, path: Path, dpi: int = 100) -> Path:
        fig.canvas.draw()
        drawn.append((fig, dpi))
        return path

    monkeypatch.setattr(harness, "save_figure", keep)
    doc = json.loads((replot.RESULTS / f"{name}.json").read_text())
    replot.plotter(doc)(doc, tmp_path / "plot.png")
    ((fig, dpi),) = drawn
    from matplotlib.text import Text

    axes = [ax.get_window_extent() for ax in fig.axes]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends, "the plot has no legend"
    for legend in legends:
        box = legend.get_window_extent()
        assert not any(box.overlaps(ax) for ax in axes), "a legend lies over the axes"
    scale = SHOWN_PX / (fig.get_figwidth() * dpi)
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text().strip():
            shown = text.get_fontsize() * dpi / 72 * scale
            assert shown >= LEAST_TEXT_PX, f"{text.get_text()!r}: {shown:.1f} px in the docs"
