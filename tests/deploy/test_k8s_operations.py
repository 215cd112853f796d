"""Kubernetes through the cluster's own operations: drains, evictions, deletes, scrapes.

Rendered with `kubectl kustomize`, no cluster: that `kubectl delete -k` of an overlay keeps
the checkpoints (the namespace and the run-dir claim live in k8s/storage).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .composefile import REPO, tool
from .test_manifests import _by_kind, _need, _run

SERVICES = ("learner", "weightserver", "actor")
# Each overlay and the k8s/storage variant applied with it (its namespace and claim).
STORAGE_OF = {"local": "local", "finite": "local", "gpu-learner": "gpu-learner"}


def _kubectl() -> str:
    exe = tool("kubectl")
    if exe is None:
        pytest.skip("KUBECTL NOT FOUND: the k8s kustomizations were NOT rendered or checked")
    return exe


def _render(path: Path) -> list[dict]:
    res = _run([_kubectl(), "kustomize", str(path)])
    assert res.returncode == 0, f"{path}: {res.stderr}"
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def _workloads(docs: list[dict]) -> dict[str, dict]:
    """learner, weightserver, actor (Deployments, or Jobs in a finite run) and redis."""
    found = [d for d in docs if d["kind"] in ("Deployment", "Job", "StatefulSet")]
    by_name = {d["metadata"]["name"]: d for d in found}
    assert len(by_name) == len(found) and set(by_name) == {*SERVICES, "redis"}, sorted(by_name)
    return by_name


def _validate_strictly(renders: dict[str, list[dict]], tmp_path: Path) -> None:
    """kubernetes-validate --strict over every render at once."""
    exe = _need("kubernetes-validate")
    unique: dict[str, str] = {}  # most objects are the same in every render: once each
    for name, docs in renders.items():
        for d in docs:
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
