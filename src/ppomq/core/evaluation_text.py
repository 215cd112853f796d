"""A greedy evaluation in words, for `ppomq eval` and the end of `ppomq train`.

Light on purpose (no torch, no numpy): the launcher prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def evaluation_words(ev: Mapping[str, Any], bound_flag: str) -> str:
    """'500.0 over 20 greedy episodes in 1.2 s', or what a time bound (set by `bound_flag`)
    left of it. `ev` holds mean_return, episodes, episodes_asked, seconds, cut_short and
    steps."""
    seconds = float(ev["seconds"])
    if ev["mean_return"] is None:
        return (
            f"none: no greedy episode finished within {seconds:.0f} s "
            f"({int(ev['steps']):,} env steps into the first; {bound_flag})"
        )
    n = int(ev["episodes"])
    if ev["cut_short"]:
        over = (
            f"{n} of {ev['episodes_asked']} greedy episodes "
            f"(the time bound, {bound_flag}, cut the rest)"
        )
    else:
        over = f"{n} greedy episode{'s' if n != 1 else ''}"
    return f"{float(ev['mean_return']):.1f} over {over} in {seconds:.1f} s"
