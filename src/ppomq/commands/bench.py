"""`ppomq bench compare RUN_DIR_A RUN_DIR_B`: two runs side by side.

Prints a table (env steps, wall time, SPS, when each solved, final evaluation, versions,
waste ratio, learner time by phase) and writes report.txt and compare.png (return
against env steps and against wall time, SPS over time, learner time by phase) to OUT_DIR.
Exit codes: 0 ok, 2 usage (not a run dir), 3 a run dir that does not exist.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ppomq.core.errors import UsageError


def _default_out(a: Path, b: Path) -> Path:
    return Path("runs") / f"compare-{a.name or 'a'}-vs-{b.name or 'b'}"


def cmd_compare(args: argparse.Namespace) -> int:
    from ppomq.reports.compare import compare_runs, load_run  # matplotlib stays out of `--help`

    labels: list[str | None] = [None, None]
    if args.labels:
        parts = [p.strip() for p in args.labels.split(",")]
        if len(parts) != 2 or not all(parts):
            raise UsageError("--labels takes two names separated by a comma, e.g. sync,async")
        labels = list(parts)
    a = load_run(args.run_dir_a, labels[0])
    b = load_run(args.run_dir_b, labels[1])
    out = Path(args.output) if args.output else _default_out(a.path, b.path)
    result = compare_runs(a, b, out_dir=out)
    if args.json:
        print(json.dumps(result.as_json(), indent=2, sort_keys=True))
        return 0
    print(result.table)
    for note in result.notes:
        print(f"note: {note}")
    print(f"\nreport: {result.report_path}\nplot:   {result.plot_path}")
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="compare two run dirs side by side (bench compare A B)",
        description="Benchmark tools over run dirs. The benchmarks themselves live in "
        "benchmarks/ (python -m benchmarks.<name>).",
    )
    verbs = parser.add_subparsers(dest="bench_verb", metavar="VERB", parser_class=type(parser))
    p = verbs.add_parser(
        "compare",
        help="Two run dirs side by side: table, report.txt, 4-panel compare.png.",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("run_dir_a", metavar="RUN_DIR_A", help="the baseline run (A)")
    p.add_argument("run_dir_b", metavar="RUN_DIR_B", help="the run compared with it (B)")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT_DIR",
        help="where report.txt and compare.png go (default: runs/compare-A-vs-B)",
    )
    p.add_argument("--labels", metavar="A,B", help="names for the two runs (default: dir names)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.set_defaults(func=cmd_compare)

    def no_verb(_args: argparse.Namespace) -> int:
        raise UsageError("ppomq bench: choose a verb: compare (see ppomq bench --help)")

    parser.set_defaults(func=no_verb)
