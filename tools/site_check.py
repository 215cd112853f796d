"""The built docs site, as a reader's browser shows it: headless Chromium over loopback.

    .venv/bin/python -m tools.site_check site/   # after `make docs`; exit 1 on a finding

For each page checked: no diagram left as its source text (every `mermaid` block drawn as
a drawing), nothing wider than the main content column at a 1280-px-wide window (the column
itself, no diagram, and on the CLI reference no code block, that needs a horizontal scroll
bar), and every image loaded. Chromium runs with its network closed but for loopback, so a
page that would fetch a script from a CDN fails here as it would for a reader offline. Needs
the `sitecheck` extra (selenium) and Debian's `chromium` and `chromium-driver`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

WINDOW = (1280, 900)
# How long a page may take to draw its diagrams (Mermaid renders after load).
DRAW_TIMEOUT_S = 20.0
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver", "chromium-driver")
# The first page of each nav section, the architecture page (all of the site's diagrams),
# the CLI reference (the widest code blocks) and every page that shows plots.
PAGES = (
    "index.html",
    "get-started/install/index.html",
    "concepts/architecture/index.html",
    "guides/presets-and-models/index.html",
    "benchmarks/index.html",
    "benchmarks/learning/index.html",
    "benchmarks/end-to-end/index.html",
    "benchmarks/scaling/index.html",
    "benchmarks/variants/index.html",
    "reference/settings/index.html",
    "reference/cli/index.html",
)
# Pages whose code blocks are generated to fit the column (tools/cli_docs.py): a line wider
# than it is cut off behind a scroll bar. Elsewhere a long command or log line may scroll.
CODE_FITS = ("reference/cli/index.html",)
# Source text a diagram shows when nothing drew it.
DIAGRAM_SOURCE = ("flowchart TB", "flowchart LR", "graph TD", "sequenceDiagram")

# Run in the page: what a reader would see wrong. Returns a list of strings.
PAGE_FINDINGS_JS = """
const out = [];
const main = document.querySelector(".md-content");
if (!main) return ["no .md-content element: not a page of the theme"];
if (main.scrollWidth > main.clientWidth + 1)
  out.push(`main column is ${main.scrollWidth} px wide in ${main.clientWidth} px`);
if (document.documentElement.scrollWidth > window.innerWidth + 1)
  out.push(`page scrolls sideways: ${document.documentElement.scrollWidth} px`);
for (const el of main.querySelectorAll(arguments[0] ? "pre > code, .mermaid" : ".mermaid")) {
  if (el.scrollWidth > el.clientWidth + 1) {
    const head = (el.textContent || "").trim().split("\\n")[0].slice(0, 60);
    const tag = el.tagName.toLowerCase();
    out.push(`${tag} needs ${el.scrollWidth} px in ${el.clientWidth}: ${head}`);
  }
}
for (const img of main.querySelectorAll("img")) {
  if (!img.complete || img.naturalWidth === 0)
    out.push(`image did not load: ${img.getAttribute("src")}`);
}
return out;
"""

UNDRAWN_JS = """
const text = document.querySelector(".md-content")?.innerText || "";
const raw = arguments[0].filter((s) => text.includes(s));
const blocks = [...document.querySelectorAll(".md-content .mermaid")];
// The theme swaps each <pre class="mermaid"> for a <div class="mermaid"> holding the drawing
// in a closed shadow root: a <pre> left, or a div with no height, is a diagram not drawn.
const bare = blocks.filter((b) => b.tagName === "PRE" || b.getBoundingClientRect().height < 20);
return [raw, bare.length];
"""


def missing() -> str | None:
    """Why the check cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[sitecheck]'"
    if not _which(CHROMIUM):
        return "no Chromium: apt-get install chromium chromium-driver"
    if not _which(DRIVER):
        return "no chromedriver: apt-get install chromium-driver"
    return None


def _which(names: tuple[str, ...]) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """root over HTTP on a free loopback port; yields the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def browser() -> Iterator[object]:
    """Headless Chromium with a fresh profile, no network but loopback, 1280 px wide."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="site-check-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = _which(CHROMIUM) or ""
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            # Every host name but loopback fails to resolve: a CDN fetch fails as offline.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(_which(DRIVER)))
        try:
            driver.set_page_load_timeout(60)
            yield driver
        finally:
            driver.quit()


def page_findings(driver: object, url: str) -> list[str]:
    """What is wrong with the page at url, as the browser shows it."""
    driver.get(url)  # type: ignore[attr-defined]
    deadline = time.monotonic() + DRAW_TIMEOUT_S
    while True:
        raw, bare = driver.execute_script(UNDRAWN_JS, list(DIAGRAM_SOURCE))  # type: ignore[attr-defined]
        if (not raw and not bare) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    out = [f"diagram shown as source text ({s!r})" for s in raw]
    if bare:
        out.append(f"{bare} mermaid block(s) not drawn")
    fit_code = any(url.endswith(page) for page in CODE_FITS)
    return out + list(driver.execute_script(PAGE_FINDINGS_JS, fit_code))  # type: ignore[attr-defined]


def check(site: Path, pages: tuple[str, ...] = PAGES) -> dict[str, list[str]]:
    """{page: findings} for each page of the built site that has any."""
    absent = [p for p in pages if not (site / p).is_file()]
    if absent:
        return {p: ["not in the built site"] for p in absent}
    found: dict[str, list[str]] = {}
    with serve(site) as base, browser() as driver:
        for page in pages:
            findings = page_findings(driver, base + page)
            if findings:
                found[page] = findings
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.site_check", description=__doc__)
    parser.add_argument("site", type=Path, help="the built site (make docs: site/)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"site_check: no built site at {args.site}: run `make docs` first", file=sys.stderr)
        return 2
    reason = missing()
    if reason:
        print(f"site_check: {reason}", file=sys.stderr)
        return 2
    found = check(args.site)
    for page, findings in found.items():
        for finding in findings:
            print(f"{page}: {finding}")
    print(f"site_check: {len(PAGES)} pages, {sum(map(len, found.values()))} findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
