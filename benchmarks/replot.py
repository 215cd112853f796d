"""Re-draw the committed plots of benchmarks/results/ from their JSON, running nothing.

    .venv/bin/python -m benchmarks.replot                      # every PNG there
    .venv/bin/python -m benchmarks.replot scaling.png e2e_rllib/e2e.png

Each PNG is drawn by the benchmark that wrote it, from the JSON beside it (same name), so
a change to how plots look reaches every committed figure without re-running a benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import e2e, learning, scaling, variants
from benchmarks.harness import REPO

RESULTS = REPO / "benchmarks" / "results"
LEARNING = {"mujoco-learning", "mujoco-side-by-side", "mujoco-memory", "atari-learning"}


def _scaling(doc: dict[str, Any], path: Path) -> None:
    scaling.plot(doc["summary"], path, doc["meta"]["machine"]["cpus"])


def plotter(doc: dict[str, Any]) -> Callable[[dict[str, Any], Path], Any] | None:
    """The function that draws a result document's plot, or None where none does."""
    if doc.get("benchmark") == "e2e-cartpole":
        return e2e.plot
    if doc.get("benchmark") in LEARNING:
        return learning.plot
    if "points" in doc and "cpus" in doc.get("meta", {}).get("machine", {}):
        return _scaling
    if doc.get("study") == "objective":
        return variants.plot_kl
    return None


def replot(png: Path) -> str | None:
    """Re-draw png from the JSON beside it; why not, or None when done."""
    source = png.with_suffix(".json")
    if not source.is_file():
        return f"no {source.name} beside it"
    doc = json.loads(source.read_text())
    draw = plotter(doc)
    if draw is None:
        return f"no benchmark draws {source.name}'s plot"
    draw(doc, png)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replot", description=__doc__)
    parser.add_argument("png", nargs="*", help="paths under benchmarks/results (default: all)")
    args = parser.parse_args(argv)
    pngs = [RESULTS / p for p in args.png] or sorted(RESULTS.rglob("*.png"))
    failed = 0
    for png in pngs:
        why = replot(png)
        print(f"{png.relative_to(RESULTS)}: {why or 'redrawn'}")
        failed += why is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
