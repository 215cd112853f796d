"""Kubernetes through the cluster's own operations: drains, evictions, deletes, scrapes.

Rendered with `kubectl kustomize`, no cluster: that `kubectl delete -k` of an overlay keeps
the checkpoints (the namespace and the run-dir claim live in k8s/storage); that a finite
run's Jobs replace a disrupted pod and stop on a usage error, by the exit codes the
services really give; that a drain leaves a weightserver up; that the actor's liveness
probe asks what the actor serves; that every combination of the optional components
renders, validates and still holds together, and the orders that cannot work say so; that
a learner group's ranks form one group as the learner reads torchrun's environment, and
its network policy opens TCP between learner pods only; that the PodMonitors select the
pods and the port that serve /metrics; that CURVE's key files come from read-only mounts
of the right Secrets, the ones the Kubernetes guide's (docs/guides/kubernetes.md)
commands make, and load.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
import shlex
import shutil
import signal
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from prometheus_client import CollectorRegistry

from benchmarks.deploy.composefile import REPO, SETTINGS_OF, tcp_port, tool
from ppomq.cli import build_parser
from ppomq.core.errors import UsageError
from ppomq.core.metrics import STALLED_AFTER_S, Heartbeat, start_metrics_server
from ppomq.core.transport.curvezmq import client_from_settings, server_from_settings
from ppomq.learner.group import GroupLostError, GroupSpec
from tests.support import free_port

from .test_manifests import (
    CLUSTER_SCOPED,
    _allowed,
    _by_kind,
    _container_env,
    _need,
    _run,
    _selects,
    _settings_values,
)

SERVICES = ("learner", "weightserver", "actor")
# Ranks 1..W-1 of a learner group (components/learner-group): part of the learner.
PEERS = "learner-peer"
# Each overlay and the k8s/storage variant applied with it (its namespace and claim).
STORAGE_OF = {"local": "local", "finite": "local", "gpu-learner": "gpu-learner",
              "learner-group": "local"}  # fmt: skip
# The optional components, in the order an overlay lists them (actor-hpa and learner-group
# before finite-run: the other orders fail, see test_k8s_..._after_finite_run_fails_...).
COMPONENTS = ("actor-hpa", "dns-kube-dns-only", "storage-class", "learner-group", "finite-run",
              "podmonitors")  # fmt: skip
STORAGE_CLASS = """apiVersion: v1
kind: ConfigMap
metadata:
  name: ppomq-storage-class
  annotations: {config.kubernetes.io/local-config: "true"}
data: {storageClassName: fast-ssd}
"""
# The PodMonitor fields these manifests use, as monitoring.coreos.com/v1 defines them
# (prometheus-operator's CRD, checked by hand against v0.91): no schema for it is at hand
# offline, so kubernetes-validate cannot check it (it only warns that it has none).
PODMONITOR_SPEC_FIELDS = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel"}
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout"}
DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                      r"(([0-9]+)s)?(([0-9]+)ms)?)$")  # fmt: skip


def _kubectl() -> str:
    exe = tool("kubectl")
    if exe is None:
        pytest.skip("KUBECTL NOT FOUND: the k8s kustomizations were NOT rendered or checked")
    return exe


def _render(path: Path) -> list[dict]:
    res = _run([_kubectl(), "kustomize", str(path)])
    assert res.returncode == 0, f"{path}: {res.stderr}"
    return [d for d in yaml.safe_load_all(res.stdout) if d]


@pytest.fixture(scope="module")
def k8s_copy(tmp_path_factory) -> Path:
    """A copy of k8s/ to add scratch kustomizations to (kustomize loads nothing outside a
    kustomization's root, so they must sit beside the real ones)."""
    root = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(REPO / "k8s", root)
    return root


def _scratch(root: Path, name: str, kustomization: dict, under: str = "overlays") -> Path:
    path = root / under / name
    path.mkdir(exist_ok=True)  # the same scratch one, written again, in another test
    (path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    if "storage-class.yaml" in kustomization.get("resources", []):
        (path / "storage-class.yaml").write_text(STORAGE_CLASS)
    return path


def _workloads(docs: list[dict]) -> dict[str, dict]:
    """learner, weightserver, actor (Deployments, or Jobs in a finite run) and redis, and
    learner-peer with components/learner-group."""
    found = [d for d in docs if d["kind"] in ("Deployment", "Job", "StatefulSet")]
    by_name = {d["metadata"]["name"]: d for d in found}
    assert len(by_name) == len(found), sorted(by_name)
    assert set(by_name) - {PEERS} == {*SERVICES, "redis"}, sorted(by_name)
    return by_name


def _pod_count(workload: dict) -> int:
    spec = workload["spec"]
    return spec.get("replicas", spec.get("parallelism", 1))


def _validate_strictly(renders: dict[str, list[dict]], tmp_path: Path) -> None:
    """kubernetes-validate --strict over every render at once; PodMonitors left out (no
    schema for the CRD offline: test_k8s_podmonitors_... checks them)."""
    exe = _need("kubernetes-validate")
    unique: dict[str, str] = {}  # most objects are the same in every render: once each
    for name, docs in renders.items():
        for d in docs:
            if d["kind"] != "PodMonitor":
                unique.setdefault(yaml.safe_dump(d, sort_keys=True), name)
    path = tmp_path / "renders.yaml"
    path.write_text("---\n".join(unique))
    res = _run([exe, "--strict", "--quiet", str(path)])
    assert res.returncode == 0, res.stdout + res.stderr


# --------------------------------------------------------------------- storage apart


def test_k8s_deleting_an_overlay_keeps_the_checkpoints_the_storage_kustomization_holds(
    tmp_path,
):
    """`kubectl delete -k k8s/overlays/X` deletes what the overlay renders: no namespace
    (deleting it deletes every claim in it) and no claim there. Both are in
    k8s/storage/STORAGE_OF[X], which holds every claim the overlay's pods mount."""
    renders = {}
    for overlay, storage in STORAGE_OF.items():
        docs = _render(REPO / "k8s" / "overlays" / overlay)
        kept = _render(REPO / "k8s" / "storage" / storage)
        renders[overlay], renders[f"storage-{storage}"] = docs, kept
        assert not [d for d in docs if d["kind"] in ("Namespace", "PersistentVolumeClaim")]
        assert {(d["kind"], d["metadata"]["name"]) for d in kept} == {
            ("Namespace", "ppomq"),
            ("PersistentVolumeClaim", "learner-runs"),
        }, storage
        claims = _by_kind(kept, "PersistentVolumeClaim")
        for workload in _workloads(docs).values():
            for volume in workload["spec"]["template"]["spec"].get("volumes", []):
                if "persistentVolumeClaim" in volume:
                    claim = claims[volume["persistentVolumeClaim"]["claimName"]]
                    assert claim["metadata"]["namespace"] == workload["metadata"]["namespace"]
        # Redis' claim comes from its StatefulSet's template: kept when that is deleted.
        redis = _workloads(docs)["redis"]["spec"]
        assert redis["persistentVolumeClaimRetentionPolicy"] == {
            "whenDeleted": "Retain",
            "whenScaled": "Retain",
        }
    sizes = {
        s: _by_kind(renders[f"storage-{s}"], "PersistentVolumeClaim")["learner-runs"]["spec"]
        for s in ("local", "gpu-learner")
    }
    assert sizes["local"]["resources"]["requests"]["storage"] == "1Gi"  # a laptop cluster
    assert sizes["gpu-learner"]["resources"]["requests"]["storage"] == "20Gi"
    _validate_strictly(renders, tmp_path)


def test_k8s_every_storage_variant_is_rendered_by_ci_validate():
    """deploy/ci-validate.sh renders k8s/storage/*/ as it renders k8s/overlays/*/."""
    script = (REPO / "deploy" / "ci-validate.sh").read_text()
    assert "k8s/storage/*/" in script and "k8s/overlays/*/" in script
    variants = {p.parent.name for p in (REPO / "k8s" / "storage").glob("*/kustomization.yaml")}
    assert set(STORAGE_OF.values()) | {"base"} <= variants


# --------------------------------------------------------------------- finite-run Jobs


def _finite_renders(k8s_copy: Path) -> dict[str, list[dict]]:
    over_hpa = _scratch(
        k8s_copy, "finite-over-gpu", {"namespace": "ppomq", "resources": ["../gpu-learner"],
                                      "components": ["../../components/finite-run"]},
    )  # fmt: skip
    return {"finite": _render(REPO / "k8s" / "overlays" / "finite"), "gpu": _render(over_hpa)}


def test_k8s_finite_jobs_replace_disrupted_pods_and_fail_at_once_on_a_usage_error(k8s_copy):
    """The Jobs' podFailurePolicy against the exit codes the services give: an evicted,
    drained or preempted pod (DisruptionTarget) is replaced without counting; the usage
    error's exit code fails the Job (it would repeat in every new pod); a SIGTERM without
    the condition (`kubectl delete pod`, a failed liveness probe: 128 + 15, see
    test_stop_exit_codes.py) counts and is replaced; 0 is never a failure."""
    for where, docs in _finite_renders(k8s_copy).items():
        jobs = _by_kind(docs, "Job")
        assert set(jobs) == set(SERVICES), where
        for name, job in jobs.items():
            spec = job["spec"]
            assert spec["template"]["spec"]["restartPolicy"] == "Never", (where, name)
            # A new learner pod only once the old one has stopped: the run dir is RWO.
            assert spec["podReplacementPolicy"] == "Failed", (where, name)
            rules = spec["podFailurePolicy"]["rules"]
            assert rules[0] == {"action": "Ignore", "onPodConditions": [
                {"type": "DisruptionTarget"}]}, (where, name)  # fmt: skip
            fail_job = {
                code
                for r in rules
                if r["action"] == "FailJob" and "onExitCodes" in r
                for code in r["onExitCodes"]["values"]
                if r["onExitCodes"]["operator"] == "In"
            }
            assert fail_job == {UsageError.exit_code}, (where, name)
            assert not any(0 in r.get("onExitCodes", {}).get("values", []) for r in rules)
            assert 128 + signal.SIGTERM not in fail_job
            assert spec["backoffLimit"] >= 1 and "completions" not in spec, (where, name)


def test_k8s_finite_run_over_the_hpa_overlay_drops_the_hpa_and_sets_the_actors_count(k8s_copy):
    """components/actor-hpa + finite-run ("Unable to remove nonexistent key:
    replicas"): no HPA can scale a Job, so finite-run removes it and gives the actor Job a
    count of its own; without the HPA the Job keeps the Deployment's count."""
    renders = _finite_renders(k8s_copy)
    assert not _by_kind(renders["gpu"], "HorizontalPodAutoscaler")
    gpu_actor = _by_kind(renders["gpu"], "Job")["actor"]
    assert gpu_actor["spec"]["parallelism"] == 4
    assert "ppomq/replicas-owner" not in gpu_actor["metadata"].get("annotations", {})
    assert _by_kind(renders["finite"], "Job")["actor"]["spec"]["parallelism"] == 2  # local's
    gpu_learner = _by_kind(renders["gpu"], "Job")["learner"]["spec"]["template"]["spec"]
    assert gpu_learner["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    # Both merge into the learner's ConfigMap: the finite run's end and the GPU overlay's
    # device and threads all reach the learner Job.
    (learner_cm,) = [
        d["data"] for d in renders["gpu"]
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("ppomq-learner")
    ]  # fmt: skip
    assert learner_cm["PPOMQ_TOTAL_STEPS"] == "200000"
    assert learner_cm["PPOMQ_DEVICE"] == "cuda" and learner_cm["PPOMQ_TORCH_THREADS"] == "2"


def test_k8s_actor_hpa_after_finite_run_fails_and_says_why(k8s_copy):
    """The one order of components that cannot work: with finite-run first the actors are
    a Job when actor-hpa comes, and its HPA would target a Deployment that is not there."""
    path = _scratch(
        k8s_copy, "wrong-order", {"namespace": "ppomq", "resources": ["../local"],
                                  "components": ["../../components/finite-run",
                                                 "../../components/actor-hpa"]},
    )  # fmt: skip
    res = _run([_kubectl(), "kustomize", str(path)])
    assert res.returncode != 0
    assert "actor-hpa must come before components/finite-run" in res.stderr, res.stderr
    assert "an HPA cannot scale the actor Job" in res.stderr


# --------------------------------------------------------------------- learner group

# The kubelet's expansion of a container's command, args and env values: $$ is a $,
# $(NAME) the value of a variable defined before (left as is when there is none).
_KUBELET_REF = re.compile(r"\$\$|\$\((\w+)\)")


def _kubelet_expand(text: str, env: dict[str, str]) -> str:
    return _KUBELET_REF.sub(lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


def _peer_env(docs: list[dict], container: dict, index: int, tmp: Path) -> dict[str, str]:
    """The environment `ppomq learner` gets in pod `index` of the learner-peer Job: its
    env with PEER_INDEX from the completion-index annotation, then what the container's
    shell line exports (run here by sh, with a `ppomq` on PATH that prints RANK)."""
    env: dict[str, str] = {}
    for name, value in _container_env(docs, container).items():
        env[name] = str(index) if name == "PEER_INDEX" else _kubelet_expand(value, env)
    (item,) = [i for i in container["env"] if i["name"] == "PEER_INDEX"]
    assert item["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    argv = [_kubelet_expand(a, env) for a in container["command"] + container["args"]]
    stub = tmp / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "ppomq").write_text('#!/bin/sh\necho "RANK=$RANK $*"\n')
    (stub / "ppomq").chmod(0o755)
    res = _run(argv, env={"PATH": f"{stub}:/usr/bin:/bin", "PEER_INDEX": env["PEER_INDEX"]})
    assert res.returncode == 0, res.stderr
    rank, _, args = res.stdout.strip().partition(" ")
    assert args == "learner", res.stdout  # the image's entrypoint, then the subcommand
    return env | dict([rank.split("=", 1)])


def _check_learner_group(where: str, docs: list[dict], tmp: Path) -> None:
    """Rank 0 (the learner) and ranks 1..W-1 (learner-peer's pods) form one group as the
    learner reads torchrun's environment: ranks 0..W-1 once each, one rendezvous at rank
    0's DNS name, each rank advertising its own name; the same settings, image,
    resources and CURVE keys on every rank, the run dir on rank 0 only; names published
    before readiness; all TCP between learner pods and nothing new for anyone else."""
    workloads = _workloads(docs)
    lead, peers = workloads["learner"], workloads[PEERS]
    pod0, pod = lead["spec"]["template"]["spec"], peers["spec"]["template"]["spec"]
    (c0,), (c,) = pod0["containers"], pod["containers"]
    env0 = _container_env(docs, c0)
    spec0 = GroupSpec.from_env(env0)
    assert spec0 is not None and spec0.rank == 0, where
    world = spec0.world_size
    job = peers["spec"]
    assert job["completionMode"] == "Indexed", where
    assert job["completions"] == job["parallelism"] == world - 1 >= 1, where
    # The names: headless, published before the pods are ready (readiness needs the group).
    headless = _by_kind(docs, "Service")[pod0["subdomain"]]
    assert pod["subdomain"] == pod0["subdomain"], where
    assert headless["spec"]["clusterIP"] == "None", where
    assert headless["spec"]["publishNotReadyAddresses"] is True, where
    assert all(isinstance(p["targetPort"], int) for p in headless["spec"]["ports"]), where
    labels0 = lead["spec"]["template"]["metadata"]["labels"]
    labels = peers["spec"]["template"]["metadata"]["labels"]
    assert _selects({"matchLabels": headless["spec"]["selector"]}, labels0), where
    assert _selects({"matchLabels": headless["spec"]["selector"]}, labels), where
    # The actors' --learner-addr Service: rank 0 only (the others come with the weights).
    learner_svc = _by_kind(docs, "Service")["learner"]["spec"]["selector"]
    assert _selects({"matchLabels": learner_svc}, labels0), where
    assert not _selects({"matchLabels": learner_svc}, labels), where

    rank0_host = f"{pod0['hostname']}.{pod0['subdomain']}"
    assert spec0.master_addr == rank0_host, (where, spec0.master_addr)
    assert any(p["containerPort"] == spec0.master_port for p in c0["ports"]), where
    assert spec0.master_port in {p["port"] for p in headless["spec"]["ports"]}, where
    ranks = {0: (rank0_host, env0)}
    for i in range(job["completions"]):
        env = _peer_env(docs, c, i, tmp)
        spec = GroupSpec.from_env(env)
        assert spec is not None, (where, i)
        assert (spec.world_size, spec.master_addr, spec.master_port) == (
            world, spec0.master_addr, spec0.master_port), (where, i)  # fmt: skip
        assert spec.rank not in ranks, (where, i, spec.rank)
        # An Indexed Job's pod i is named JOB-i in its subdomain.
        ranks[spec.rank] = f"{peers['metadata']['name']}-{i}.{pod['subdomain']}", env
    assert sorted(ranks) == list(range(world)), where
    settings = {}
    for rank, (host, env) in ranks.items():
        env = {k: v.replace("$(REDIS_PASSWORD)", "pw") for k, v in env.items()}
        s = SETTINGS_OF["learner"](**_settings_values(env))
        assert s.rollout_advertise == f"tcp://{host}:{tcp_port(s.rollout_bind)}", (where, rank)
        assert urlsplit(s.redis_url.get_secret_value()).username == "ppomq-learner", where
        settings[rank] = s.model_dump(exclude={"rollout_advertise", "redis_url"})
    assert all(s == settings[0] for s in settings.values()), where
    # The same pod but for the run dir, which rank 0 alone writes (and its RWO claim).
    for key in ("image", "resources", "securityContext", "livenessProbe", "readinessProbe"):
        assert c.get(key) == c0.get(key), (where, key)
    for key in ("tolerations", "nodeSelector", "securityContext", "affinity"):
        assert pod.get(key) == pod0.get(key), (where, key)
    claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert not claims and not [m for m in c["volumeMounts"] if m["mountPath"] == "/data/runs"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod0["volumes"]
            if "persistentVolumeClaim" in v] == ["learner-runs"], where  # fmt: skip
    # A rank's exit is the run's: 0 the end (no restart), 6 the group restarting.
    assert pod["restartPolicy"] == "Never", where
    rules = job["podFailurePolicy"]["rules"]
    by_code = {code: r["action"] for r in rules if "onExitCodes" in r
               for code in r["onExitCodes"]["values"]}  # fmt: skip
    assert by_code == {UsageError.exit_code: "FailJob", GroupLostError.exit_code: "Ignore"}
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in rules
    _check_group_network(where, docs, labels0, labels)


def _check_group_network(where: str, docs: list[dict], rank0: dict, peer: dict) -> None:
    policies = list(_by_kind(docs, "NetworkPolicy").values())

    def pod(labels: dict) -> dict:
        return {"labels": labels, "namespace": "ppomq"}

    def can(src: dict, dst: dict, port: int) -> bool:
        return _allowed(policies, "Egress", src["labels"], dst, port) and _allowed(
            policies, "Ingress", dst["labels"], src, port)  # fmt: skip

    def component(name: str) -> dict:
        return pod({"app.kubernetes.io/name": "ppomq", "app.kubernetes.io/component": name})

    # The rendezvous, the rollouts, and gloo's pair ports (random): every TCP port.
    for port in (29500, 5555, 9100, 41234, 60999):
        assert can(pod(peer), pod(rank0), port) and can(pod(rank0), pod(peer), port), (
            where, port)  # fmt: skip
        assert can(pod(peer), pod(peer), port), (where, port)
    # Nothing else opens: no one else reaches the rendezvous or the pair ports.
    for other in ("actor", "weightserver", "redis"):
        for dst in (rank0, peer):
            for port in (29500, 41234):
                assert not can(component(other), pod(dst), port), (where, other, port)
                assert not can(pod(dst), component(other), port), (where, other, port)
    for dst in (rank0, peer):
        assert can(component("actor"), pod(dst), 5555), where
        assert can(pod(dst), component("redis"), 6379), where
    # The group's policy admits learner pods only, on TCP only.
    (group,) = [p for p in policies if p["metadata"]["name"] == "learner-group"]
    for rule in group["spec"]["ingress"] + group["spec"]["egress"]:
        assert all(p == {"protocol": "TCP"} for p in rule["ports"]), where
        for peer_sel in rule.get("from", []) + rule.get("to", []):
            assert set(peer_sel) == {"podSelector"}, where
            assert peer_sel["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
                "learner"), where  # fmt: skip


def _group_renders(k8s_copy: Path) -> dict[str, list[dict]]:
    """The overlay, and the component with the GPU overlay and a finite run."""
    gpu_finite = _scratch(
        k8s_copy, "group-gpu-finite", {"namespace": "ppomq", "resources": ["../gpu-learner"],
                                       "components": ["../../components/learner-group",
                                                      "../../components/finite-run"]},
    )  # fmt: skip
    return {
        "learner-group": _render(REPO / "k8s" / "overlays" / "learner-group"),
        "gpu+learner-group+finite-run": _render(gpu_finite),
    }


def test_k8s_learner_group_ranks_rendezvous_at_rank_0_under_their_own_names(k8s_copy, tmp_path):
    """components/learner-group as the learner reads it: W ranks once each, rank 0 the
    base's learner with the run dir, the others learner-peer's pods with the same pod,
    over the local overlay and over the GPU overlay as a finite run (both as Jobs then,
    and the peers on the GPU too); all TCP between learner pods, nothing else opened."""
    renders = _group_renders(k8s_copy)
    for where, docs in renders.items():
        _check_learner_group(where, docs, tmp_path)
        _check_curve(where, docs)
        _check_weightserver_disruption(where, docs)
    finite = _workloads(renders["gpu+learner-group+finite-run"])
    assert finite["learner"]["kind"] == finite[PEERS]["kind"] == "Job"
    gpu = finite[PEERS]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == 1
    assert _workloads(renders["learner-group"])["learner"]["kind"] == "Deployment"
    # W = 3 the way the component's header says to set it: three ranks, two peers.
    three = _scratch(k8s_copy, "group-of-three", {
        "namespace": "ppomq", "resources": ["../learner-group"],
        "configMapGenerator": [{"name": "ppomq-learner-group", "behavior": "merge",
                                "literals": ["WORLD_SIZE=3"]}],
        "patches": [{"target": {"kind": "Job", "name": PEERS}, "patch":
                     "- {op: replace, path: /spec/completions, value: 2}\n"
                     "- {op: replace, path: /spec/parallelism, value: 2}\n"}],
    })  # fmt: skip
    renders["three"] = _render(three)
    _check_learner_group("three", renders["three"], tmp_path)
    _validate_strictly(renders, tmp_path)


def test_k8s_learner_group_after_finite_run_fails_and_says_why(k8s_copy):
    """With finite-run first the learner is a Job already: there is no Deployment to copy
    the peers' pod from, and the render stops saying which order works."""
    path = _scratch(
        k8s_copy, "group-wrong-order", {"namespace": "ppomq", "resources": ["../local"],
                                        "components": ["../../components/finite-run",
                                                       "../../components/learner-group"]},
    )  # fmt: skip
    res = _run([_kubectl(), "kustomize", str(path)])
    assert res.returncode != 0
    assert "learner-group must come before components/finite-run" in res.stderr, res.stderr


# --------------------------------------------------------------------- weightservers


def _check_weightserver_disruption(where: str, docs: list[dict]) -> None:
    ws = _workloads(docs)["weightserver"]
    labels = ws["spec"]["template"]["metadata"]["labels"]
    (pdb,) = [
        p for p in _by_kind(docs, "PodDisruptionBudget").values()
        if _selects(p["spec"]["selector"], labels)
    ]  # fmt: skip
    # An integer minAvailable: the only budget a Job's pods (no scale subresource) can
    # have; below the pod count, or every drain would wait forever.
    assert isinstance(pdb["spec"]["minAvailable"], int), where
    assert "maxUnavailable" not in pdb["spec"], where
    assert 1 <= pdb["spec"]["minAvailable"] < _pod_count(ws), where
    (spread,) = ws["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname", where
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway", where  # one-node clusters too
    assert _selects(spread["labelSelector"], labels), where


def test_k8s_a_drain_leaves_a_weightserver_up_and_they_spread_over_nodes(k8s_copy):
    renders = {o: _render(REPO / "k8s" / "overlays" / o) for o in STORAGE_OF}
    renders.update(_finite_renders(k8s_copy))
    for where, docs in renders.items():
        _check_weightserver_disruption(where, docs)


# --------------------------------------------------------------------- actor liveness


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_k8s_actor_liveness_asks_the_main_loops_heartbeat_that_the_actor_serves():
    """The probe's path and port are what the actor serves (ppomq.core.metrics), and that
    answers by the main loop's heartbeat: 200 while fresh, 503 once stalled. /metrics,
    the old probe, is not it: it answers whatever the main loop does."""
    docs = _render(REPO / "k8s" / "overlays" / "local")
    (c,) = _workloads(docs)["actor"]["spec"]["template"]["spec"]["containers"]
    probe = c["livenessProbe"]["httpGet"]
    assert probe["path"].split("?")[0] == "/healthz"
    (port,) = [p["containerPort"] for p in c["ports"] if p["name"] == probe["port"]]
    assert port == int(_container_env(docs, c)["PPOMQ_METRICS_PORT"])

    now = [0.0]
    heartbeat = Heartbeat(clock=lambda: now[0])
    local = free_port()  # the actor's port, here on a free one
    start_metrics_server(local, addr="127.0.0.1", registry=CollectorRegistry(),
                         heartbeat=heartbeat)  # fmt: skip
    url = f"http://127.0.0.1:{local}{probe['path']}"
    assert _get(url) == 200
    now[0] += STALLED_AFTER_S + 1
    assert _get(url) == 503
    assert _get(f"http://127.0.0.1:{local}/metrics") == 200


# --------------------------------------------------------------------- combinations


def _combinations() -> list[tuple[str, tuple[str, ...]]]:
    """Every subset of the optional components, in order, over local and gpu-learner
    (which has actor-hpa already)."""
    out = []
    for base in ("local", "gpu-learner"):
        optional = [c for c in COMPONENTS if not (base == "gpu-learner" and c == "actor-hpa")]
        for n in range(len(optional) + 1):
            out += [(base, combo) for combo in itertools.combinations(optional, n)]
    return out


def _check_combination(
    where: str, base: str, combo: tuple[str, ...], docs: list[dict], tmp: Path
) -> None:
    wrong_ns = [
        f"{d['kind']}/{d['metadata']['name']}"
        for d in docs
        if d["kind"] not in CLUSTER_SCOPED and d["metadata"].get("namespace") != "ppomq"
    ]
    assert not wrong_ns, (where, wrong_ns)  # fmt: skip
    workloads = _workloads(docs)
    finite = "finite-run" in combo
    hpa_wanted = "actor-hpa" in combo or base == "gpu-learner"
    for name in SERVICES:
        assert workloads[name]["kind"] == ("Job" if finite else "Deployment"), (where, name)
    actor = workloads["actor"]
    hpas = _by_kind(docs, "HorizontalPodAutoscaler")
    assert bool(hpas) == (hpa_wanted and not finite), where
    for hpa in hpas.values():  # its target is a Deployment here, whose count is the HPA's
        ref = hpa["spec"]["scaleTargetRef"]
        assert (ref["kind"], ref["name"]) == (actor["kind"], actor["metadata"]["name"]), where
        assert "replicas" not in actor["spec"], where
    if finite:
        assert actor["spec"]["parallelism"] == (4 if hpa_wanted else 2), where
        assert not actor["metadata"].get("annotations"), where
        for name in SERVICES:
            assert "podFailurePolicy" in workloads[name]["spec"], (where, name)
    _check_weightserver_disruption(where, docs)
    template = workloads["redis"]["spec"]["volumeClaimTemplates"][0]["spec"]
    assert (template.get("storageClassName") == "fast-ssd") == ("storage-class" in combo), where
    dns = _by_kind(docs, "NetworkPolicy")["allow-dns"]["spec"]["egress"][0]
    assert ("to" in dns) == ("dns-kube-dns-only" in combo), where
    monitors = _by_kind(docs, "PodMonitor")
    assert bool(monitors) == ("podmonitors" in combo), where
    _check_podmonitors(where, docs, monitors)
    _check_curve(where, docs)
    assert (PEERS in workloads) == ("learner-group" in combo), where
    if "learner-group" in combo:
        _check_learner_group(where, docs, tmp)


@pytest.mark.slow  # renders and validates every overlay: about 15 s
def test_k8s_every_combination_of_the_components_renders_validates_and_holds_together(
    k8s_copy, tmp_path
):
    """actor-hpa, dns-kube-dns-only, storage-class, learner-group, finite-run and
    podmonitors all combine, over either overlay, listed in that order (actor-hpa and
    learner-group before finite-run)."""
    combos, paths = {}, {}
    for i, (base, combo) in enumerate(_combinations()):
        kustomization = {
            "namespace": "ppomq",
            "resources": [f"../{base}"] + (["storage-class.yaml"] if "storage-class" in combo
                                           else []),
            "components": [f"../../components/{c}" for c in combo],
        }  # fmt: skip
        name = f"combo-{i}"
        paths[name] = _scratch(k8s_copy, name, kustomization)
        combos[name] = (base, combo)
    assert len(combos) == 2**6 + 2**5
    with ThreadPoolExecutor(max_workers=2) as pool:  # kubectl processes, one per core
        renders = dict(zip(paths, pool.map(_render, paths.values()), strict=True))
    for name, docs in renders.items():
        base, combo = combos[name]
        _check_combination(f"{base}+{'+'.join(combo) or 'nothing'}", base, combo, docs, tmp_path)
    _validate_strictly(renders, tmp_path)


# --------------------------------------------------------------------- PodMonitors


def _check_podmonitors(where: str, docs: list[dict], monitors: dict[str, dict]) -> None:
    """Each PodMonitor uses only the CRD fields listed above, and selects the pods of
    exactly one service, on the container port that serves its /metrics."""
    workloads = _workloads(docs)
    covered = set()
    for name, pm in monitors.items():
        assert pm["apiVersion"] == "monitoring.coreos.com/v1", (where, name)
        spec = pm["spec"]
        assert set(spec) <= PODMONITOR_SPEC_FIELDS and "selector" in spec, (where, name)
        selected = [
            w for w in workloads.values()
            if _selects(spec["selector"], w["spec"]["template"]["metadata"]["labels"])
        ]  # fmt: skip
        # One service's pods: a learner group's ranks are all the learner's.
        names = {w["metadata"]["name"] for w in selected}
        assert len(names - {PEERS}) == 1, (where, name, names)
        assert PEERS not in names or "learner" in names, (where, name, names)
        covered |= names - {PEERS}
        for workload in selected:
            (c,) = workload["spec"]["template"]["spec"]["containers"]
            metrics_port = int(_container_env(docs, c)["PPOMQ_METRICS_PORT"])
            for endpoint in spec["podMetricsEndpoints"]:
                assert set(endpoint) <= ENDPOINT_FIELDS, (where, name, endpoint)
                assert endpoint.get("path", "/metrics") == "/metrics"
                assert DURATION.match(endpoint.get("interval", "0")), (where, name)
                ports = [p["containerPort"] for p in c["ports"]
                         if p.get("name") == endpoint["port"]]  # fmt: skip
                assert ports == [metrics_port], (where, name, endpoint["port"])
    if monitors:
        assert covered == set(SERVICES), (where, covered)


def test_k8s_podmonitors_select_each_services_pods_and_their_metrics_port(k8s_copy):
    """For a Prometheus Operator, which ignores the pods' prometheus.io/* annotations: the
    component's PodMonitors, with the `release` label README's patch adds, over the
    Deployments and over a finite run's Jobs."""
    patch = {
        "target": {"group": "monitoring.coreos.com", "kind": "PodMonitor"},
        "patch": "- {op: add, path: /metadata/labels/release, value: kube-prometheus-stack}",
    }
    for base, extra in (("local", []), ("gpu-learner", ["finite-run"])):
        path = _scratch(k8s_copy, f"monitored-{base}", {
            "namespace": "ppomq", "resources": [f"../{base}"],
            "components": [f"../../components/{c}" for c in [*extra, "podmonitors"]],
            "patches": [patch],
        })  # fmt: skip
        docs = _render(path)
        monitors = _by_kind(docs, "PodMonitor")
        assert set(monitors) == set(SERVICES), base
        assert all(m["metadata"]["labels"]["release"] == "kube-prometheus-stack"
                   for m in monitors.values())  # fmt: skip
        assert all(m["metadata"]["namespace"] == "ppomq" for m in monitors.values())
        _check_podmonitors(base, docs, monitors)
    # The metrics port is open to scrapers in other namespaces (where Prometheus runs).
    policies = list(_by_kind(docs, "NetworkPolicy").values())
    prometheus = {"labels": {"app.kubernetes.io/name": "prometheus"}, "namespace": "monitoring"}
    for service in SERVICES:
        pod = {"app.kubernetes.io/name": "ppomq", "app.kubernetes.io/component": service}
        assert _allowed(policies, "Ingress", pod, prometheus, 9100), service


# --------------------------------------------------------------------- CURVE keys

CURVE_SERVER, CURVE_ALLOWED, CURVE_ACTOR = (
    "ppomq-curve-server", "ppomq-curve-allowed", "ppomq-curve-actor"
)  # fmt: skip
# Service -> its CURVE settings -> (the Secret whose mount the path is in, the Secret's key
# that is the file; None: the path is the mount itself, a directory of all its keys).
_SERVER_FILES = {
    "PPOMQ_CURVE_SERVER_CERT": (CURVE_SERVER, "server.key_secret"),
    "PPOMQ_CURVE_ALLOWED_DIR": (CURVE_ALLOWED, None),
}
CURVE_FILES = {
    "learner": _SERVER_FILES,
    PEERS: _SERVER_FILES,
    "weightserver": _SERVER_FILES,
    "actor": {
        "PPOMQ_CURVE_ACTOR_CERT": (CURVE_ACTOR, "actor.key_secret"),
        "PPOMQ_CURVE_SERVER_PUBLIC_CERT": (CURVE_ACTOR, "server.key"),
    },
}
# Least privilege: the only ppomq-curve-* Secrets each service's pods mount. The actors
# never get the server's secret key (nor the allow-list).
CURVE_SECRETS_OF = {
    "learner": {CURVE_SERVER, CURVE_ALLOWED},
    PEERS: {CURVE_SERVER, CURVE_ALLOWED},
    "weightserver": {CURVE_SERVER, CURVE_ALLOWED},
    "actor": {CURVE_ACTOR},
    "redis": set(),
}


def _secret_names(pod: dict) -> set[str]:
    names = set()
    for v in pod.get("volumes", []):
        if "secret" in v:
            names.add(v["secret"]["secretName"])
        for source in v.get("projected", {}).get("sources", []):
            if "secret" in source:
                names.add(source["secret"]["name"])
    return names


def _secret_mounts(pod: dict, container: dict) -> dict[str, tuple[dict, dict]]:
    """mountPath -> (the volumeMount, the `secret` volume source) of the container's
    Secret mounts."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    return {
        m["mountPath"].rstrip("/"): (m, volumes[m["name"]]["secret"])
        for m in container.get("volumeMounts", [])
        if "secret" in volumes[m["name"]]
    }


def _mounted_as(path: str, mounts: dict[str, tuple[dict, dict]]) -> tuple[str, str | None] | None:
    """(Secret, key) whose file `path` is, (Secret, None) for a mount itself, or None."""
    for mount_path, (mount, secret) in mounts.items():
        if path == mount_path:
            return secret["secretName"], None
        if path.startswith(mount_path + "/") and "subPath" not in mount:
            rel = path[len(mount_path) + 1 :]
            items = secret.get("items")
            if items is None:
                return secret["secretName"], rel
            keys = [i["key"] for i in items if i["path"] == rel]
            return (secret["secretName"], keys[0]) if len(keys) == 1 else None
    return None


def _check_curve(where: str, docs: list[dict]) -> None:
    """The learner and the weightservers find the server's pair and the allow-list, the
    actors their own pair and the server's public cert, in read-only mounts of those
    Secrets only, readable by the containers' user and by no other; no plaintext."""
    for cm in _by_kind(docs, "ConfigMap").values():
        assert "PPOMQ_INSECURE_PLAINTEXT" not in cm.get("data", {}), where
    for name, workload in _workloads(docs).items():
        pod = workload["spec"]["template"]["spec"]
        for c in pod["containers"] + pod.get("initContainers", []):
            assert "PPOMQ_INSECURE_PLAINTEXT" not in _container_env(docs, c), (where, name)
        curve = {s for s in _secret_names(pod) if s.startswith("ppomq-curve-")}
        assert curve == CURVE_SECRETS_OF[name], (where, name, curve)
        if name not in CURVE_FILES:
            continue
        (c,) = pod["containers"]
        env = _container_env(docs, c)
        mounts = _secret_mounts(pod, c)
        for setting, want in CURVE_FILES[name].items():
            got = _mounted_as(env.get(setting, "<unset>"), mounts)
            assert got == want, (where, name, setting, env.get(setting), got)
        context = pod["securityContext"]
        for mount, secret in mounts.values():
            if not secret["secretName"].startswith("ppomq-curve-"):
                continue
            assert mount.get("readOnly") is True, (where, name, mount)
            items = secret.get("items")
            # Named keys only, so that a key added to the Secret by mistake stays out;
            # the allow-list is every key of its Secret.
            assert (items is None) == (secret["secretName"] == CURVE_ALLOWED), (where, name)
            if name == "actor":
                assert [i["key"] for i in items if i["key"].endswith(".key_secret")] == [
                    "actor.key_secret"
                ], where
            # The kubelet makes the files root:fsGroup and adds group read: the user
            # (runAsGroup = fsGroup) reads them; no mode bit for others.
            assert context.get("fsGroup") == context["runAsGroup"], (where, name)
            modes = [secret.get("defaultMode", 0o644)]
            modes += [i["mode"] for i in items or [] if "mode" in i]
            assert all(m & 0o007 == 0 and m & 0o040 for m in modes), (where, name, modes)


def _readme_curve_blocks() -> list[str]:
    text = (REPO / "docs" / "guides" / "kubernetes.md").read_text()
    section = text.split("\n## CURVE keys\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def _commands(block: str) -> list[list[str]]:
    return [argv for line in block.replace("\\\n", " ").splitlines()
            if (argv := shlex.split(line, comments=True))]  # fmt: skip


def _mount_like_the_kubelet(root: Path, mount_path: str, secret: dict, source: dict) -> None:
    """The Secret's files as the kubelet lays them out: in a timestamped directory behind
    the `..data` link, each file a link through it (what the loaders' glob sees too)."""
    d = root / mount_path.lstrip("/")
    stamp = d / "..2025_01_01_00_00_00.000000001"
    stamp.mkdir(parents=True)
    (d / "..data").symlink_to(stamp.name)
    data = secret["data"]
    items = source.get("items") or [{"key": k, "path": k} for k in data]
    for item in items:
        assert "/" not in item["path"], item
        (stamp / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
        os.chmod(stamp / item["path"], source.get("defaultMode", 0o644))
        (d / item["path"]).symlink_to(f"..data/{item['path']}")


def test_k8s_curve_secrets_from_the_readme_commands_give_keys_the_services_load(
    tmp_path, monkeypatch
):
    """docs/guides/kubernetes.md "CURVE keys", run as written (`kubectl create secret
    --dry-run=client` over keys from `ppomq keys generate`), mounted as each overlay's pods
    mount them: every service loads its CURVE settings, the actors hold the server's public
    key and a key of the allow-list, and no actor file holds the server's secret key. The
    rotation block makes the same three Secrets from the new keys and restarts all three
    Deployments."""
    import zmq.auth

    kubectl = _kubectl()
    create, rotate = _readme_curve_blocks()
    monkeypatch.chdir(tmp_path)
    secrets = {}
    for argv in _commands(create):
        if argv[:3] == ["ppomq", "keys", "generate"]:
            args = build_parser().parse_args(argv[1:])
            assert args.func(args) == 0
            continue
        assert argv[:6] == ["kubectl", "-n", "ppomq", "create", "secret", "generic"], argv
        res = _run([kubectl, *argv[1:], "--dry-run=client", "-o", "yaml"], cwd=tmp_path)
        assert res.returncode == 0, (argv, res.stderr)
        secret = yaml.safe_load(res.stdout)
        secrets[secret["metadata"]["name"]] = secret
    assert set(secrets) == {CURVE_SERVER, CURVE_ALLOWED, CURVE_ACTOR}
    server_public, _ = zmq.auth.load_certificate(tmp_path / "keys" / "server.key")

    # Rotation: the same Secrets from the new keys, replaced in place, then the restart.
    rotated = _commands(rotate)
    replaced = [a for a in rotated if a[:4] == ["kubectl", "-n", "ppomq", "create"]]
    applied = [a[:a.index("--dry-run=client")] for a in replaced]  # fmt: skip
    made = [a for a in _commands(create) if a[0] == "kubectl"]
    assert [[w.replace("keys-new/", "keys/") for w in a] for a in applied] == made
    assert all(a[a.index("--dry-run=client") :] == ["--dry-run=client", "-o", "yaml", "|",
               "kubectl", "apply", "-f", "-"] for a in replaced)  # fmt: skip
    (restart,) = [a for a in rotated if "rollout" in a]
    assert restart[3:5] == ["rollout", "restart"]
    assert set(restart[5:]) == {f"deployment/{s}" for s in SERVICES}

    for overlay in STORAGE_OF:
        docs = _render(REPO / "k8s" / "overlays" / overlay)
        loaded = {}
        for name in SERVICES:
            pod = _workloads(docs)[name]["spec"]["template"]["spec"]
            (c,) = pod["containers"]
            root = tmp_path / "pods" / overlay / name
            volumes = {v["name"]: v for v in pod["volumes"]}
            for m in c["volumeMounts"]:
                source = volumes[m["name"]].get("secret")
                if source and source["secretName"] in secrets:
                    _mount_like_the_kubelet(root, m["mountPath"], secrets[source["secretName"]],
                                            source)  # fmt: skip
            env = _container_env(docs, c)
            for setting in CURVE_FILES[name]:
                env[setting] = str(root) + env[setting]
            if "PPOMQ_REDIS_URL" in env:  # assembled from the Secret by the kubelet
                env["PPOMQ_REDIS_URL"] = env["PPOMQ_REDIS_URL"].replace("$(REDIS_PASSWORD)", "pw")
            s = SETTINGS_OF[name](**_settings_values(env))
            if name == "actor":
                loaded[name] = client_from_settings(s)
                for f in root.rglob("*"):
                    if f.is_file() and not f.is_symlink():
                        public, secret = zmq.auth.load_certificate(f)
                        assert secret is None or public == loaded[name].public, (overlay, f)
            else:
                bind, flag = (s.rollout_bind, "--rollout-bind") if name == "learner" else (
                    s.bind, "--bind")  # fmt: skip
                loaded[name] = server_from_settings(s, bind=bind, bind_flag=flag)
                assert loaded[name] is not None and loaded[name].public == server_public
        actor = loaded["actor"]
        assert actor is not None and actor.server_public == server_public, overlay
        for name in ("learner", "weightserver"):
            allowed = zmq.auth.load_certificates(loaded[name].allowed_dir)
            assert actor.public in allowed, (overlay, name)
