"""Text tables for the CLI (`ppomq weights`, `ppomq status`, `ppomq bench compare`), drawn
by rich.

The text is meant for `grep`/`awk` as much as for eyes: no borders, no box-drawing
characters, columns two spaces apart, no trailing blanks, and a width no row ever wraps
at. Only on a terminal is the header bold. rich is imported here, when a table is drawn,
so that `ppomq --help` does not pay for it.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Collection, Sequence
from typing import Any

# Wide enough that rich never wraps or truncates a row: a table is as wide as its cells.
_WIDTH = 100_000


def format_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    right: Collection[int] = (),
    rule: bool = False,
    styled: bool = False,
) -> str:
    """`rows` under `headers` as text lines (no final newline). Columns whose index is in
    `right` are right-aligned, header included; `rule` draws a line of dashes under the
    header; `styled` emits ANSI codes (bold header) and is for a terminal only. Cells are
    str()-ed and never read as rich markup."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if rule:
        # Only the row under the header: "-" in its fill and column-crossing places.
        border: box.Box | None = box.Box(
            "    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True
        )
        padding = (0, 1, 0, 0)  # the blank divider is the second space between columns
    else:
        border, padding = None, (0, 1)
    table = Table(
        box=border,
        show_edge=False,
        pad_edge=False,
        padding=padding,
        header_style="bold" if styled else None,
    )
    for i, name in enumerate(headers):
        table.add_column(Text(str(name)), justify="right" if i in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))
    console = Console(
        file=io.StringIO(),
        width=_WIDTH,
        force_terminal=styled,
        no_color=None if styled else True,
        color_system="standard" if styled else None,
        highlight=False,
        emoji=False,
        markup=False,
    )
    console.print(table)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines())


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    right: Collection[int] = (),
    rule: bool = False,
) -> None:
    """format_table to stdout, bold header only when stdout is a terminal."""
    isatty = getattr(sys.stdout, "isatty", None)
    print(format_table(headers, rows, right=right, rule=rule, styled=bool(isatty and isatty())))
