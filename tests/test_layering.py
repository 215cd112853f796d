"""The floors go one way: proto <- core <- services <- CLI and launcher.

Read from the source's imports (function-level ones included), so that a lower floor that
reaches up fails here rather than in a reviewer's head. docs/architecture.md draws the same
floors.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The design card's folders are mapped under `ppomq` (pyproject.toml's package-dir).
ROOTS = {
    "ppomq": REPO / "src" / "ppomq",
    "ppomq.proto": REPO / "proto",
    "ppomq.actor": REPO / "services" / "actor",
    "ppomq.learner": REPO / "services" / "learner",
    "ppomq.weightserver": REPO / "services" / "weightserver",
}
SERVICES = ("ppomq.actor", "ppomq.learner", "ppomq.weightserver")
TOP = ("ppomq.cli", "ppomq.commands", "ppomq.launch", "ppomq.reports", "ppomq.healthcheck")


def _module_name(path: Path) -> str:
    root_pkg, root = max(
        ((pkg, d) for pkg, d in ROOTS.items() if path.is_relative_to(d)),
        key=lambda item: len(item[1].parts),
    )
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([root_pkg, *parts])


def _modules() -> dict[str, Path]:
    found = {}
    for root in ROOTS.values():
        for path in root.rglob("*.py"):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every `ppomq` import in the file, relative ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append((node.lineno, "." * node.level + (node.module or "")))
            elif node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
                out += [(node.lineno, n if n in MODULES else node.module) for n in names]
    return [(line, name) for line, name in out if name.startswith(("ppomq", "."))]


def _floor(module: str) -> str:
    if module == "ppomq.proto" or module.startswith("ppomq.proto."):
        return "proto"
    if module == "ppomq" or module.startswith("ppomq.core"):
        return "core"
    if module.startswith(SERVICES):
        return "service"
    assert module.startswith(TOP), f"{module} is on no floor: add it to one in this test"
    return "top"


ALLOWED = {
    "proto": {"proto"},
    "core": {"proto", "core"},
    "service": {"proto", "core", "service"},
    "top": {"proto", "core", "service", "top"},
}


def _service(module: str) -> str:
    return ".".join(module.split(".")[:2])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_floors_only(module: str) -> None:
    path = MODULES[module]
    here = _floor(module)
    for line, target in _imports(path):
        where = f"{path.relative_to(REPO)}:{line} imports {target}"
        assert not target.startswith("."), f"{where}: use the absolute ppomq.* name"
        there = _floor(target)
        assert there in ALLOWED[here], f"{where}: the {here} floor may not import the {there} floor"
        if here == there == "service":
            assert _service(target) == _service(module), f"{where}: services import only the core"
        assert not any(
            part.startswith("_") and not part.startswith("__") for part in target.split(".")[2:]
        ) or _service(target) == _service(module), f"{where}: a private module of another package"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_a_module_boundary(module: str) -> None:
    path = MODULES[module]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ppomq"):
            private = [a.name for a in node.names if a.name.startswith("_") and a.name[1] != "_"]
            assert not private, f"{path.relative_to(REPO)}:{node.lineno} imports {private}"


def test_every_module_is_on_a_floor() -> None:
    assert {_floor(m) for m in MODULES} == {"proto", "core", "service", "top"}
