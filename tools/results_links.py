"""mkdocs hook: the benchmark result files the pages name, shipped with the site and linked.

The pages name result files as inline code (`benchmarks/results/e2e.json`, or
`results/e2e.json` on the benchmark pages). The files live outside docs/, so the build
copies benchmarks/results/ into the site at the same path, and each inline code that names
an existing file becomes a link to its copy. A name that is no file (`results/NAME.json`)
stays plain text. The project has no public repository address to link instead.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from mkdocs.utils import get_relative_url

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SITE_PATH = "benchmarks/results"
# Inline code whose whole text is a result file's path; not inside a link already.
NAMED = re.compile(r"(?<!>)<code>(?:benchmarks/)?results/([\w./-]+?)</code>(?!</a>)")


def link_results(html: str, page_url: str, results: Path = RESULTS) -> str:
    """html with each inline code naming a file under results linked to its copy."""

    def link(match: re.Match[str]) -> str:
        name = match.group(1)
        path = results / name
        if ".." in Path(name).parts or not path.is_file():
            return match.group(0)
        href = get_relative_url(f"{SITE_PATH}/{name}", page_url)
        return f'<a href="{href}">{match.group(0)}</a>'

    return NAMED.sub(link, html)


def on_page_content(html: str, page: Any, **_: Any) -> str:
    return link_results(html, page.url)


def on_post_build(config: Any, **_: Any) -> None:
    shutil.copytree(RESULTS, Path(config["site_dir"]) / SITE_PATH, dirs_exist_ok=True)
