"""One page from a GPU-machine script's results: the CUDA tests' JUnit XML and each part's
markdown (benchmarks/device/common.sh's `report`).

    python -m benchmarks.device.report RES OUT TITLE COMMAND PAGE STEM:LABEL...
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def tests_section(xml: Path, state: str) -> list[str]:
    if not xml.exists():
        return [state + "."]
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    a = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")}
    lines = [f"{state}: {a['tests']} tests, {a['failures']} failed, {a['errors']} errors, "
             f"{a['skipped']} skipped, {float(a['time'] or 0):.1f} s.", ""]  # fmt: skip
    for case in suite.iter("testcase"):
        status = next((t for t in ("failure", "error", "skipped") if case.find(t) is not None),
                      "passed")  # fmt: skip
        lines.append(f"- `{case.get('classname')}::{case.get('name')}`: {status}")
    return lines


def page(res: Path, title: str, command: str, parts: list[str], state: str, quick: bool) -> str:
    smoke = " (QUICK=1: a smoke test, the figures mean little)" if quick else ""
    lines = [f"# {title}", "", f"`{command}`{smoke}", "", "## (a) The CUDA tests", ""]
    lines += tests_section(res / "pytest.xml", state)
    for i, part in enumerate(parts):
        stem, _, label = part.partition(":")
        md = res / f"{stem}.md"
        body = md.read_text().replace("\n# ", "\n## ") if md.exists() else f"# {label}: not run\n"
        lines += ["", body.replace("# ", f"## ({chr(ord('b') + i)}) ", 1).rstrip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    res, out, title, command, name, *parts = argv
    text = page(Path(res), title, command, parts, os.environ.get("TEST_STATE", "not run"),
                os.environ.get("QUICK") == "1")  # fmt: skip
    Path(out, name).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
