"""The floors of the code, read from its imports, and the diagrams of docs/concepts/architecture.md.

    .venv/bin/python -m tools.architecture           # prints the generated blocks
    .venv/bin/python -m tools.architecture --write   # rewrites them in the page

Imports are read from the source (function-level ones included), so the diagrams and the
floor rules (tests/test_layering.py) are the code's own, never a drawing kept by hand. The
runtime diagram takes its ports from the settings' defaults, its key names from the key
schema, and each socket type only where the module drawn as creating it does.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
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


def _port(endpoint: str) -> str:
    return endpoint.rpartition(":")[2]


def _socket(kind: str, path: str) -> str:
    """`kind` (PUSH, ROUTER, ...) when the module at path creates such a socket."""
    text = (REPO / path).read_text()
    if not re.search(rf"\.socket\(zmq\.{kind}\)", text):
        raise ValueError(f"{path} creates no zmq.{kind} socket: redraw the runtime diagram")
    return kind


def runtime_diagram() -> str:
    """Mermaid: the running processes, the sockets between them and the Redis keys they use."""
    from ppomq.core.rundir import CHECKPOINT_FILE
    from ppomq.core.settings import (
        LearnerSettings,
        RedisSettings,
        WeightserverSettings,
        WeightStoreSettings,
    )
    from ppomq.core.store.keys import RunKeys

    def default(model: type, field: str) -> str:
        return str(model.model_fields[field].default)

    keys = RunKeys("{run}")

    def key(name: str) -> str:
        return name.removeprefix(keys.prefix)

    version_key = key(keys.weights(0)).removesuffix("0") + "{v}"

    rollouts = _port(default(LearnerSettings, "rollout_bind"))
    weights = _port(default(WeightserverSettings, "bind"))
    redis_url = default(RedisSettings, "redis_url")
    keep = default(WeightStoreSettings, "keep_versions")
    push = _socket("PUSH", "src/ppomq/core/transport/rollouts.py")
    pull = _socket("PULL", "src/ppomq/core/transport/rollouts.py")
    dealer = _socket("DEALER", "src/ppomq/core/transport/weights_client.py")
    router = _socket("ROUTER", "services/weightserver/server.py")
    lines = [
        "```mermaid",
        "flowchart TB",
        '  train["ppomq train<br/>starts Redis, one weightserver,<br/>the learner and the actors"]',
        '  actors["actors<br/>ppomq actor, any number"]',
        '  learner["learner<br/>ppomq learner"]',
        f'  redis[("Redis<br/>default {redis_url}<br/>keys under {keys.prefix}")]',
        '  ws["weightservers<br/>ppomq weightserver, one or more"]',
        f'  rundir[("run dir<br/>{CHECKPOINT_FILE}, progress, events")]',
        '  status["ppomq status"]',
        f'  actors -->|"rollouts<br/>{push} to {pull}<br/>default port {rollouts}"| learner',
        f'  learner -->|"HASH {version_key}, newest {keep} kept<br/>{key(keys.latest)}<br/>'
        f'PUBLISH on channel {key(keys.channel)}"| redis',
        f'  learner -->|"{key(keys.stats)}, {key(keys.actors)}, {key(keys.finished)}"| redis',
        f'  redis -->|"SUBSCRIBE {key(keys.channel)}<br/>{key(keys.latest)},'
        f' {version_key}, {key(keys.finished)}"| ws',
        f'  actors <-->|"newer than v?<br/>{dealer} to {router}<br/>default port {weights}"| ws',
        '  learner -->|"checkpoints, records"| rundir',
        f'  status -->|"reads {key(keys.stats)}, {key(keys.actors)}, {key(keys.finished)}"| redis',
        "  train -.-> actors & learner & ws & redis",
        "```",
    ]
    return "\n".join(lines)


def diagrams() -> dict[str, str]:
    """Each generated block of docs/concepts/architecture.md, by its marker name."""
    return {"runtime": runtime_diagram(), "floors": floors_diagram(), "learner": learner_diagram()}


DOC = REPO / "docs" / "concepts" / "architecture.md"


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- {name} diagram: generated by python -m tools.architecture -->\n)"
        rf"(.*?)(<!-- end {name} diagram -->)",
        re.DOTALL,
    )


def rewrite(text: str) -> str:
    """text with each generated block replaced by the code's drawing; its markers must be there."""
    for name, block in diagrams().items():
        pattern = _block(name)
        if not pattern.search(text):
            raise ValueError(f"the page lacks the markers of the {name} diagram")
        text = pattern.sub(lambda m, b=block: m.group(1) + b + "\n" + m.group(3), text)
    return text


def room_imports() -> dict[str, set[str]]:
    """Which rooms each room imports (for the doc's prose and its test)."""
    out: dict[str, set[str]] = defaultdict(set)
    for a, b in edges():
        if _room(a) != _room(b):
            out[_room(a)].add(_room(b))
    return out


def main(argv: list[str] | None = None) -> int:
    where = DOC.relative_to(REPO) if DOC.is_relative_to(REPO) else DOC
    parser = argparse.ArgumentParser(
        prog="python -m tools.architecture", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--write", action="store_true", help=f"rewrite the blocks in {where}")
    args = parser.parse_args(argv)
    if not args.write:
        for name, block in diagrams().items():
            print(f"<!-- {name} diagram: generated by python -m tools.architecture -->")
            print(block)
            print(f"<!-- end {name} diagram -->")
        return 0
    try:
        old = DOC.read_text()
        new = rewrite(old)
    except ValueError as err:
        print(f"tools.architecture: {err}", file=sys.stderr)
        return 1
    if new != old:
        DOC.write_text(new)
    print(f"{where}: {'rewritten' if new != old else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
