"""The docs site links each benchmark result file a page names to its copy in the site
(tools/results_links.py, an mkdocs hook)."""

from __future__ import annotations

from pathlib import Path

from tools.results_links import link_results


def _results(tmp_path: Path) -> Path:
    (tmp_path / "device").mkdir(exist_ok=True)
    (tmp_path / "e2e.json").write_text("{}")
    (tmp_path / "device" / "atari_fleet.md").write_text("# fleet")
    return tmp_path


def test_inline_code_naming_a_result_file_links_its_copy_from_the_page(tmp_path: Path) -> None:
    html = "<p>see <code>benchmarks/results/e2e.json</code> and <code>results/device/atari_fleet.md</code></p>"  # noqa: E501
    out = link_results(html, "benchmarks/end-to-end/", _results(tmp_path))
    assert '<a href="../results/e2e.json"><code>benchmarks/results/e2e.json</code></a>' in out
    assert '<a href="../results/device/atari_fleet.md"><code>results/device' in out
    assert link_results(html, "", _results(tmp_path)).count('href="benchmarks/results/') == 2


def test_names_that_are_no_file_code_blocks_and_links_stay_as_they_are(tmp_path: Path) -> None:
    html = (
        "<code>benchmarks/results/NAME.json</code>"
        "<code>benchmarks/results/../../pyproject.toml</code>"
        "<pre><code>cat benchmarks/results/e2e.json</code></pre>"
        '<a href="x"><code>benchmarks/results/e2e.json</code></a>'
    )
    assert link_results(html, "benchmarks/x/", _results(tmp_path)) == html
