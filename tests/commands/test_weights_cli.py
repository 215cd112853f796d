"""`ppomq weights` end to end: real subprocesses against a real redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import redis

from ppomq.core.store.keys import BLOB_FIELD, RunKeys
from ppomq.core.store.weight_store import WeightStore
from tests.support import free_port

from ..weightserver.helpers import make_weights, mlp_tensors

RUN = "cli-run"


def ppomq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "ppomq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
    )


def weights(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return ppomq("weights", *args, "--redis-url", redis_url, "--run-id", RUN)


def as_json(result: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ppomq: error:") and text in lines[0], lines


@pytest.fixture
def run(redis_client: redis.Redis) -> WeightStore:
    """Versions 1..4 kept (K=3, version 1 protected): stored are 1, 2, 3, 4."""
    store = WeightStore(redis_client, RUN, keep_versions=3)
    store.publish(*make_weights(1))
    store.protect(1)
    for v in (2, 3, 4):
        store.publish(*make_weights(v))
    return store


def test_list_marks_latest_and_protected(redis_url: str, run: WeightStore) -> None:
    doc = as_json(weights(redis_url, "list", "--json"))
    assert doc["latest"] == 4
    flags = {v["version"]: (v["latest"], v["protected"]) for v in doc["versions"]}
    assert flags == {1: (False, True), 2: (False, False), 3: (False, False), 4: (True, False)}
    assert doc["versions"][0]["num_params"] == sum(a.size for a in mlp_tensors(1).values())
    text = weights(redis_url, "list")
    assert text.returncode == 0
    rows = {line.split()[0]: line for line in text.stdout.splitlines()[2:]}
    assert rows["1"].endswith("protected") and rows["4"].endswith("latest")
    assert rows["2"].split()[-1] != "latest"


def test_env_variables_select_redis_and_run(redis_url: str, run: WeightStore) -> None:
    result = ppomq(
        "weights", "list", "--json", env={"PPOMQ_REDIS_URL": redis_url, "PPOMQ_RUN_ID": RUN}
    )
    assert as_json(result)["run_id"] == RUN


def test_show_gives_per_tensor_norms(redis_url: str, run: WeightStore) -> None:
    doc = as_json(weights(redis_url, "show", "3", "--json"))
    expected = mlp_tensors(3)
    assert doc["version"] == 3 and doc["learner_step"] == 3
    assert [t["name"] for t in doc["tensors"]] == list(expected)
    for t in doc["tensors"]:
        assert t["shape"] == list(expected[t["name"]].shape) and t["dtype"] == "float32"
        assert t["l2_norm"] == pytest.approx(float(np.linalg.norm(expected[t["name"]])))
    text = weights(redis_url, "show", "latest")
    assert text.returncode == 0
    assert "version       4 (latest)" in text.stdout and "pi.2.weight" in text.stdout


def test_diff_gives_l2_distance_and_relative_change(redis_url: str, run: WeightStore) -> None:
    doc = as_json(weights(redis_url, "diff", "2", "4", "--json"))
    a, b = mlp_tensors(2), mlp_tensors(4)
    for row in doc["tensors"]:
        dist = float(np.linalg.norm(b[row["name"]].astype(np.float64) - a[row["name"]]))
        assert row["l2_distance"] == pytest.approx(dist)
        assert row["rel_change"] == pytest.approx(dist / np.linalg.norm(a[row["name"]]))
    same = as_json(weights(redis_url, "diff", "3", "3", "--json"))
    assert same["total"] == {"l2_distance": 0.0, "rel_change": 0.0}
    assert "total" in weights(redis_url, "diff", "2", "latest").stdout


def test_export_writes_a_file_torch_load_opens(
    redis_url: str, run: WeightStore, tmp_path: Path
) -> None:
    out = tmp_path / "sub" / "w.pt"
    doc = as_json(weights(redis_url, "export", "2", "-o", str(out), "--json"))
    assert doc["version"] == 2
    import torch

    loaded = torch.load(out, weights_only=True)  # the safe loader: plain data only
    assert loaded["metadata"]["version"] == 2 and loaded["metadata"]["run_id"] == RUN
    for name, arr in mlp_tensors(2).items():
        np.testing.assert_array_equal(loaded["state_dict"][name].numpy(), arr)


def test_verify_passes_then_fails_on_a_corrupted_blob(
    redis_url: str, run: WeightStore, redis_client: redis.Redis
) -> None:
    doc = as_json(weights(redis_url, "verify", "all", "--json"))
    assert doc["ok"] and [r["version"] for r in doc["results"]] == [1, 2, 3, 4]
    _, blob = make_weights(3)
    redis_client.hset(RunKeys(RUN).weights(3), BLOB_FIELD, blob[:-8] + b"\0" * 8)
    one_line_error(weights(redis_url, "verify", "all"), 1, "failed verification: 3")
    result = weights(redis_url, "verify", "3", "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["results"][0]["ok"] is False
    one_line_error(weights(redis_url, "export", "3", "-o", "/tmp/x.pt"), 1, "not exported")


def test_protect_and_unprotect(redis_url: str, run: WeightStore) -> None:
    assert as_json(weights(redis_url, "protect", "3", "--json"))["changed"] is True
    assert run.protected_versions() == {1, 3}
    assert "already protected" in weights(redis_url, "protect", "3").stdout
    assert as_json(weights(redis_url, "unprotect", "1", "--json"))["changed"] is True
    assert run.protected_versions() == {3}
    one_line_error(weights(redis_url, "protect", "99"), 3, "no version 99")


def test_exit_3_for_an_unknown_run_or_version(redis_url: str, run: WeightStore) -> None:
    result = ppomq("weights", "list", "--redis-url", redis_url, "--run-id", "other")
    one_line_error(result, 3, f"no run 'other' in Redis (runs here: {RUN})")
    one_line_error(weights(redis_url, "show", "42"), 3, "no version 42")
    one_line_error(weights(redis_url, "diff", "1", "42"), 3, "no version 42")


def test_exit_2_for_usage_errors(redis_url: str, run: WeightStore) -> None:
    one_line_error(weights(redis_url, "show", "abc"), 2, "not a version")
    one_line_error(weights(redis_url, "show", "-3"), 2, "")
    one_line_error(ppomq("weights"), 2, "choose a verb")
    one_line_error(ppomq("weights", "list", "--redis-url", "http://x"), 2, "not a Redis URL")
    one_line_error(ppomq("weights", "list", "--run-id", "bad id!"), 2, "run_id")


def test_exit_4_when_redis_is_unreachable() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for verb in (["list"], ["show", "1"], ["protect", "1"]):
        one_line_error(ppomq("weights", *verb, "--redis-url", url), 4, "cannot reach Redis")
