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
    from ppomq.core.settings import AUTO, NO_PRESET, preset_names, preset_summary, preset_text

    words = {  # the two names that are no file
        AUTO: "picked from the env's spaces: atari for uint8 image observations, mujoco for "
        f"continuous actions on vector observations, else {NO_PRESET} (ppomq train's default)",
        NO_PRESET: "the built-in defaults, which are the cartpole preset's",
    }
    if args.name in words:
        print(f"{args.name}: {words[args.name]}")
        return 0
    if args.name:
        print(preset_text(args.name), end="")
        return 0
    rows = {name: preset_summary(name) for name in preset_names()} | words
    width = max(map(len, rows))
    for name, summary in rows.items():
        print(f"{name:<{width}}  {summary}")
    return 0
