"""The floors of the code, read from its imports, and the diagrams of docs/concepts/architecture.md.

    .venv/bin/python -m tools.architecture > /tmp/diagrams.md   # what the doc must hold

Imports are read from the source (function-level ones included), so the diagrams and the
floor rules (tests/test_layering.py) are the code's own, never a drawing kept by hand.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

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
FLOORS = ("proto", "core", "service", "top")
# What each floor may import.
ALLOWED = {
    "proto": {"proto"},
    "core": {"proto", "core"},
    "service": {"proto", "core", "service"},
    "top": {"proto", "core", "service", "top"},
}


def module_name(path: Path) -> str:
    root_pkg, root = max(
        ((pkg, d) for pkg, d in ROOTS.items() if path.is_relative_to(d)),
        key=lambda item: len(item[1].parts),
    )
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([root_pkg, *parts])


@cache
def modules() -> dict[str, Path]:
    """Every module of the package, by name."""
    return {
        module_name(path): path for root in ROOTS.values() for path in sorted(root.rglob("*.py"))
    }


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every `ppomq` import in the file; a relative one as written."""
    known = modules()
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append((node.lineno, "." * node.level + (node.module or "")))
            elif node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
                out += [(node.lineno, n if n in known else node.module) for n in names]
    return [(line, name) for line, name in out if name.startswith(("ppomq", "."))]


def floor(module: str) -> str:
    if module == "ppomq.proto" or module.startswith("ppomq.proto."):
        return "proto"
    if module == "ppomq" or module.startswith("ppomq.core"):
        return "core"
    if module.startswith(SERVICES):
        return "service"
    if module.startswith(TOP):
        return "top"
    raise ValueError(f"{module} is on no floor: add it to one in tools/architecture.py")


def edges() -> set[tuple[str, str]]:
    """(importer, imported) between modules of the package."""
    known = modules()
    out = set()
    for module, path in known.items():
        for _, target in imports(path):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                out.add((module, target))
    return out


def _room(module: str) -> str:
    """The box a module is drawn in on the floors diagram."""
    parts = module.split(".")
    if floor(module) == "core":
        if module in ("ppomq", "ppomq.core"):
            return "core.records"
        name = parts[2]
        if name in ("settings", "models", "envs", "transport", "store"):
            return f"core.{name}"
        if name in ("rundir", "events", "timeline", "storage", "evaluate", "safe_load"):
            return "core.records"
        return "core.shell"  # service_shell, signals, log, metrics, errors, procutil
    if floor(module) == "top":
        return "cli" if parts[1] in ("cli", "commands", "healthcheck") else parts[1]
    return parts[1]  # proto, actor, learner, weightserver


ROOM_LABELS = {
    "proto": "proto: wire formats (ROLLOUT.md, WEIGHTS.md)",
    "core.settings": "settings",
    "core.models": "models",
    "core.envs": "envs",
    "core.transport": "transport: rollout sockets, CurveZMQ, weights client",
    "core.store": "store: Redis keys, weight store, connection",
    "core.records": "run records: rundir, events, timeline, evaluate",
    "core.shell": "service shell: signals, log, metrics, errors",
    "actor": "actor",
    "learner": "learner",
    "weightserver": "weightserver",
    "cli": "cli: the ppomq command, healthcheck",
    "launch": "launch: ppomq train, zygote",
    "reports": "reports: tables, compare",
}
FLOOR_LABELS = {
    "top": "top floor: CLI and launcher",
    "service": "services",
    "core": "shared core",
    "proto": "wire",
}


def floors_diagram() -> str:
    """Mermaid: the floors, their rooms, and which room imports which."""
    links = sorted({(_room(a), _room(b)) for a, b in edges()} - {(r, r) for r in ROOM_LABELS})
    lines = ["```mermaid", "flowchart TB"]
    for fl in reversed(FLOORS):
        rooms = sorted({_room(m) for m in modules() if floor(m) == fl})
        lines.append(f'  subgraph floor_{fl}["{FLOOR_LABELS[fl]}"]')
        lines += [f'    {_id(r)}["{ROOM_LABELS[r]}"]' for r in rooms]
        lines.append("  end")
    lines += [f"  {_id(a)} --> {_id(b)}" for a, b in links if _keep(a, b)]
    lines.append("```")
    return "\n".join(lines)


def _keep(a: str, b: str) -> bool:
    """Draw arrows between floors and between services; within the core only to proto."""
    return not (a.startswith("core.") and b.startswith("core."))


def learner_diagram() -> str:
    """Mermaid: the learner's modules and which imports which."""
    learner = sorted(m for m in modules() if m.startswith("ppomq.learner."))
    links = sorted((a, b) for a, b in edges() if a in learner and b in learner)
    lines = ["```mermaid", "flowchart LR"]
    lines += [f'  {_id(m)}["{m.rpartition(".")[2]}"]' for m in learner]
    lines += [f"  {_id(a)} --> {_id(b)}" for a, b in links]
    lines.append("```")
    return "\n".join(lines)


def _id(name: str) -> str:
    return name.replace(".", "_")


def diagrams() -> dict[str, str]:
    """Each generated block of docs/concepts/architecture.md, by its marker name."""
    return {"floors": floors_diagram(), "learner": learner_diagram()}


def room_imports() -> dict[str, set[str]]:
    """Which rooms each room imports (for the doc's prose and its test)."""
    out: dict[str, set[str]] = defaultdict(set)
    for a, b in edges():
        if _room(a) != _room(b):
            out[_room(a)].add(_room(b))
    return out


if __name__ == "__main__":
    for name, block in diagrams().items():
        print(f"<!-- {name} diagram: generated by python -m tools.architecture -->")
        print(block)
        print(f"<!-- end {name} diagram -->")
