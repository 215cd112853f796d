"""Every headline figure comes from the one record it names.

The prose checked: the README's "Headline figures" section, each benchmarks page's summary
(its "The short answer" block) and the overview page's "Headline figures" section. The form
is documented in docs/reference/development.md: each table row, paragraph or list item
names its records as `benchmarks/results/NAME.json` (a link or a code span); every number
in it must be a number of one of those records at the prose's precision; a row, paragraph
or list item naming two records says "different runs"; and every record named carries
every field of benchmarks/record.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import record

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "benchmarks"
# `benchmarks/results/NAME.json`, or `results/NAME.json` as the benchmark pages may write it.
RECORD_REF = re.compile(r"(?<!\w)(?:benchmarks/)?results/([\w./-]+?\.json)")
# A figure: digits with thousands commas or decimals, an optional k/M scale, not part of an
# identifier (CartPole-v1, H100, 64-64, a date, a version such as 3.0.0); "1,024-sample" is.
NUMBER = re.compile(
    r"(?<![\w.\-/])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:\s?([kM])(?!\w))?(?![\w/]|[-.,]\d)"
)
SAYS_DIFFERENT_RUNS = re.compile(r"different runs", re.IGNORECASE)


@dataclass(frozen=True)
class Unit:
    """One table row, paragraph or list item of checked prose."""

    where: str
    text: str


def _section(text: str, title: str) -> str:
    """The body of `## title` up to the next `## ` heading ('' when absent)."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def _summary(text: str) -> str:
    """A page's summary: from its `**The short answer` line to the next `**Command**` line or
    `##` heading ('' when the page has none)."""
    m = re.search(r"^\*\*The short answer.*?(?=^\*\*Command\*\*|^## |\Z)", text, re.M | re.S)
    return m.group(0) if m else ""


def _units(where: str, text: str) -> Iterator[Unit]:
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    block: list[str] = []

    def flush() -> Iterator[Unit]:
        if block:
            yield Unit(where, " ".join(s.strip() for s in block))
            block.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            yield from flush()
            if not re.fullmatch(r"\|[\s|:-]+\|", stripped):
                yield Unit(where, stripped)
        elif not stripped or re.match(r"[-*] |\d+\. ", stripped):
            yield from flush()
            if stripped:
                block.append(stripped)
        else:
            block.append(stripped)
    yield from flush()


def checked_units() -> list[Unit]:
    readme = (REPO / "README.md").read_text()
    units = list(_units("README.md, Headline figures", _section(readme, "Headline figures")))
    for page in sorted(PAGES.glob("*.md")):
        text = page.read_text()
        where = f"docs/benchmarks/{page.name}"
        units += _units(f"{where}, summary", _summary(text))
        if page.name == "index.md":
            units += _units(f"{where}, Headline figures", _section(text, "Headline figures"))
    return units


def records_named(text: str) -> list[str]:
    return sorted({f"benchmarks/results/{name}" for name in RECORD_REF.findall(text)})


def _prose(text: str) -> str:
    """The words a reader reads: no code spans, link targets or emphasis marks."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return text.replace("**", "").replace("*", "")


@dataclass(frozen=True)
class Figure:
    text: str
    value: float
    tolerance: float


def figures(text: str) -> list[Figure]:
    out = []
    for m in NUMBER.finditer(_prose(text)):
        digits, scale = m.group(1).replace(",", ""), m.group(2)
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        factor = {"k": 1e3, "M": 1e6}.get(scale or "", 1.0)
        out.append(Figure(m.group(0), float(digits) * factor, 0.5 * 10**-decimals * factor))
    return out


# Each single run's raw figures, beside the summary a page quotes: thousands of numbers,
# among which almost any figure a sentence could give matches one by chance. Left out of a
# record that has a summary (SUMMARY_KEYS); a record of a few runs and nothing else (a GPU
# machine's rounds) is quoted run by run.
RAW_KEYS = {"runs", "points", "pairs", "earlier_runs"}
SUMMARY_KEYS = {"summary", "ratios", "results", "rows"}


def record_numbers(doc: object) -> list[float]:
    """Every number a record holds: its numeric values, and the numbers in its strings (a
    command's flags, a label's shape); where it has a summary, not its single runs."""
    if isinstance(doc, dict) and SUMMARY_KEYS & doc.keys():
        doc = {k: v for k, v in doc.items() if k not in RAW_KEYS}
    return _numbers(doc)


def _numbers(doc: object) -> list[float]:
    if isinstance(doc, bool) or doc is None:
        return []
    if isinstance(doc, int | float):
        return [float(doc)]
    if isinstance(doc, str):
        return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", doc.replace(",", ""))]
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in _numbers(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in _numbers(v)]
    return []


def holds(numbers: list[float], fig: Figure) -> bool:
    return any(abs(x - fig.value) <= fig.tolerance * (1 + 1e-9) for x in numbers)


def problems(unit: Unit, units_records: list[str]) -> list[str]:
    """What is wrong with one unit of prose, given the records it names."""
    found = figures(unit.text)
    if not found:
        return []
    if not units_records:
        return [f"figures {[f.text for f in found]} name no record"]
    out = []
    docs = {}
    for ref in units_records:
        path = REPO / ref
        if not path.exists():
            out.append(f"{ref} does not exist")
            continue
        docs[ref] = json.loads(path.read_text())
        missing = record.missing_fields(docs[ref])
        if missing:
            out.append(f"{ref} lacks {', '.join(missing)}")
    if len(units_records) > 1 and not SAYS_DIFFERENT_RUNS.search(unit.text):
        out.append(f"draws on {len(units_records)} records without saying they are different runs")
    numbers = [x for doc in docs.values() for x in record_numbers(doc)]
    out += [f"{f.text!r} is in none of {units_records}" for f in found if not holds(numbers, f)]
    return out


def all_problems() -> list[str]:
    out = []
    for unit in checked_units():
        out += [
            f"{unit.where}: {p}\n    {unit.text[:160]}"
            for p in problems(unit, records_named(unit.text))
        ]
    return out


# --- the checker itself, on prose whose answer is known ----------------------------------


def test_a_figure_matches_its_record_at_the_prose_precision() -> None:
    numbers = record_numbers({"ratio": 0.6533, "sps": 328039.9, "cmd": "--seeds 5"})
    assert holds(numbers, figures("0.65×")[0]) and holds(numbers, figures("328k")[0])
    assert holds(numbers, figures("5 seeds")[0])
    assert not holds(numbers, figures("0.66×")[0]) and not holds(numbers, figures("0.654")[0])


def test_identifiers_dates_and_versions_are_not_figures() -> None:
    text = "CartPole-v1 on an H100, 64-64 MLP, 2026-11-24, PufferLib 3.0.0, `--seeds 7`"
    assert figures(text) == []
    assert [f.value for f in figures("65,536-sample updates, seeds 1–3, 328k SPS")] == [
        65536, 1, 3, 328000,
    ]  # fmt: skip


def test_records_are_found_in_links_and_code_spans() -> None:
    text = "[a](../../benchmarks/results/e2e.json), `results/device/atari_fleet.json`"
    assert records_named(text) == [
        "benchmarks/results/device/atari_fleet.json", "benchmarks/results/e2e.json",
    ]  # fmt: skip


def test_two_records_in_one_sentence_must_say_so() -> None:
    unit = Unit("x", "0.57× (benchmarks/results/a.json) at 0.98× (benchmarks/results/b.json)")
    assert any("different runs" in p for p in problems(unit, records_named(unit.text)))


# --- the prose --------------------------------------------------------------------------


def test_the_checked_prose_is_found() -> None:
    units = checked_units()
    assert any(u.where.startswith("README.md") and "|" in u.text for u in units)
    assert any("index.md, Headline figures" in u.where for u in units)


def test_every_headline_figure_is_in_the_one_record_it_names() -> None:
    found = all_problems()
    assert not found, f"{len(found)} problem(s):\n" + "\n".join(found)


def test_a_figure_found_only_among_single_runs_of_a_summarised_record_does_not_count() -> None:
    """A record's single runs hold thousands of numbers: a stale figure matched one of them
    by chance, and the check passed prose that no summary of the record says."""
    doc = {"summary": {"ratio": 0.62}, "runs": [{"ratio": 0.41}]}
    assert holds(record_numbers(doc), figures("0.62×")[0])
    assert not holds(record_numbers(doc), figures("0.41×")[0])
    # A record of a few runs and nothing else is quoted run by run.
    assert holds(record_numbers({"runs": [{"sps": 6515.2}]}), figures("6,515")[0])
