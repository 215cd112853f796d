"""The built docs site, in headless Chromium with no network but loopback (tools/site_check.py):
every diagram drawn, nothing wider than the main column at 1280 px, every image loaded.

Skips, saying what to install, where mkdocs, Selenium or Debian's chromium and
chromium-driver are missing (.ci/run installs them).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import site_check
from tools.architecture import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser_ready() -> None:
    reason = site_check.missing()
    if importlib.util.find_spec("mkdocs") is None:
        reason = "mkdocs is not installed: make docs installs it"
    if reason:
        pytest.skip(f"the site check cannot run here: {reason}")


@pytest.fixture(scope="module")
def built_site(browser_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def test_built_pages_draw_their_diagrams_fit_1280_px_and_load_their_images(
    built_site: Path,
) -> None:
    assert (built_site / "benchmarks" / "results" / "e2e.json").is_file()  # what pages link
    found = site_check.check(built_site)
    assert not found, "\n".join(f"{page}: {f}" for page, fs in found.items() for f in fs)


def test_the_check_sees_source_text_diagrams_cdn_scripts_wide_code_and_broken_images(
    browser_ready: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No diagram of this page can ever be drawn (no mermaid script loads): the check's wait
    # for drawing, there for the real pages, would only add its whole length here.
    monkeypatch.setattr(site_check, "DRAW_TIMEOUT_S", 1.0)
    # A page of the theme's shape with each fault: a diagram left as its source, one whose
    # script would come from a CDN, a code line wider than the column, an image not there.
    page = tmp_path / "reference" / "cli" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        "<html><body><div class='md-content' style='width:700px'>"
        "<pre><code>flowchart TB\n  a --> b</code></pre>"
        "<pre class='mermaid'><code>graph TD\n  c --> d</code></pre>"
        "<script src='https://cdn.example.org/mermaid.min.js'></script>"
        f"<pre><code style='display:block;overflow:auto'>{'x' * 400}</code></pre>"
        "<img src='missing.png'>"
        "</div></body></html>"
    )
    found = site_check.check(tmp_path, ("reference/cli/index.html",))
    text = "\n".join(found["reference/cli/index.html"])
    assert "diagram shown as source text ('flowchart TB')" in text
    assert "diagram shown as source text ('graph TD')" in text
    assert "1 mermaid block(s) not drawn" in text
    assert "code needs" in text
    assert "image did not load: missing.png" in text
