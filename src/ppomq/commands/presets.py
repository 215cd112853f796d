"""`ppomq presets [NAME]`: the presets `--preset` accepts, or one preset's file."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "presets",
        help="list the presets of published hyper-parameters (--preset NAME)",
        description="Without NAME: each preset and its source. With NAME: the preset's TOML "
        "file, each value with the source it cites. `ppomq train --preset NAME` (or "
        "PPOMQ_PRESET=NAME) starts from it; a config file, variables and flags override it.",
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="print this preset's file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ppomq.core.settings import preset_names, preset_summary, preset_text

    if args.name:
        print(preset_text(args.name), end="")
        return 0
    names = preset_names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {preset_summary(name)}")
    return 0
