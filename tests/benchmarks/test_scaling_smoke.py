"""Smoke: the scaling benchmark runs W=1,2 on the synthetic env and writes well-formed
JSON, Markdown and PNG. Speedups are not asserted (timing belongs to the benchmark)."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

from benchmarks import scaling
from benchmarks.envs import SLEEP_ENV_SPEC

pytestmark = pytest.mark.slow


def test_sleep_env_is_reachable_by_module_prefixed_id():
    from ppomq.core.envs import check_env_id, make_vector_env

    check_env_id(SLEEP_ENV_SPEC)  # imports benchmarks.envs, which registers it
    env = make_vector_env(SLEEP_ENV_SPEC, 2, [1, 2])
    obs, reward, *_ = env.step(env.action_space.sample())
    assert obs.shape == (2, 4) and list(reward) == [1.0, 1.0]
    env.close()
    assert gym.make(SLEEP_ENV_SPEC).unwrapped.step_s > 0


def test_quick_run_writes_json_markdown_and_plot(tmp_path):
    out = tmp_path / "results"
    code = scaling.main(["--quick", "--envs", "sleep", "--workers", "1,2",
                         "--out", str(out), "--workdir", str(tmp_path / "runs")])  # fmt: skip
    assert code == 0
    doc = json.loads((out / "scaling.json").read_text())
    rows = doc["summary"]["sleep"]
    assert [r["workers"] for r in rows] == [1, 2]
    for r in rows:
        assert r["sps"] > 0 and math.isfinite(r["speedup"]) and math.isfinite(r["efficiency"])
        assert math.isclose(r["efficiency"], r["speedup"] / r["workers"])
    assert rows[0]["speedup"] == pytest.approx(1.0)
    assert all(p["env_steps_in_window"] > 0 for p in doc["points"])
    assert "| 2 |" in (out / "scaling.md").read_text()
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
