"""How the benchmark plots are drawn, so that they read at the docs site's width.

The docs theme shows an image at most about 700 px wide (its content column in a 1280-px
window). A figure FIG_WIDTH_IN inches wide saved at DPI is shrunk there by
700 / (FIG_WIDTH_IN x DPI) = 0.7, so 10.5-pt text (15 px drawn) is about 10 px on screen;
a click on a plot in the site opens it at full size. Legends go below the axes, outside
them, where they cover no curve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

from benchmarks import harness

FIG_WIDTH_IN = 10.0
DPI = 100
STYLE = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10.5,
    "ytick.labelsize": 10.5,
    "legend.fontsize": 10.5,
}
# Line styles told apart in a legend: one per seed of a figure.
LINE_STYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))

F = TypeVar("F", bound=Callable[..., Any])


def styled(plot: F) -> F:
    """plot, drawing with STYLE's font sizes."""

    @wraps(plot)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with harness.pyplot().rc_context(STYLE):
            return plot(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def figure(nrows: int, ncols: int, row_height_in: float) -> tuple[Any, Any]:
    """(figure, axes as an nrows x ncols array), FIG_WIDTH_IN wide, laid out with room for
    a legend below (`legend_below`)."""
    return harness.pyplot().subplots(
        nrows,
        ncols,
        figsize=(FIG_WIDTH_IN, row_height_in * nrows),
        layout="constrained",
        squeeze=False,
    )


def legend_below(fig: Any, handles: Sequence[Any], ncols: int) -> None:
    """One legend for the whole figure, under its axes."""
    fig.legend(handles=list(handles), loc="outside lower center", ncols=ncols, frameon=False)


def save(fig: Any, path: Any) -> Any:
    return harness.save_figure(fig, path, dpi=DPI)
