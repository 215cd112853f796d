"""`ppomq eval`: weights exported from Redis evaluate without being told the env."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from ppomq.core.models import build_model, numpy_state
from ppomq.core.store.connect import connect_redis
from ppomq.core.store.weight_store import WeightStore
from ppomq.proto import pack_weights

SPEC = {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
        "hidden": [8], "activation": "tanh", "obs_norm": None}  # fmt: skip


def _ppomq(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    return subprocess.run([sys.executable, "-m", "ppomq.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip


def test_an_exported_version_evaluates_on_the_env_it_was_trained_on(redis_url, tmp_path):
    torch.manual_seed(0)
    header, blob = pack_weights(
        3, numpy_state(build_model(SPEC)), model=SPEC,
        extra={"env_id": "CartPole-v1", "run_id": "ev"},
    )  # fmt: skip
    WeightStore(connect_redis(redis_url), "ev").publish(header, blob)
    out = tmp_path / "v3.pt"
    exported = _ppomq("weights", "export", "3", "-o", str(out), "--redis-url", redis_url,
                      "--run-id", "ev")  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    result = _ppomq("eval", "--weights", str(out), "--episodes", "2", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["env_id"] == "CartPole-v1" and doc["version"] == 3
    # The exact score of those weights, played here without ppomq's evaluation code: the
    # greedy action of the network on episodes seeded 0 and 1 (eval's --seed 0).
    assert doc["mean_return"] == _greedy_cartpole_return(seeds=(0, 1))


def _greedy_cartpole_return(*, seeds: tuple[int, ...]) -> float:
    """Mean return of the weights published above (SPEC, torch seed 0), argmax of logits."""
    import gymnasium as gym

    torch.manual_seed(0)
    policy = build_model(SPEC)
    env = gym.make("CartPole-v1")
    total = 0.0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            with torch.no_grad():
                logits, _ = policy(torch.as_tensor(obs, dtype=torch.float32)[None])
            obs, reward, terminated, truncated, _ = env.step(int(logits.argmax(-1)[0]))
            total += float(reward)
            done = terminated or truncated
    env.close()
    return total / len(seeds)


def test_eval_needs_exactly_one_source_and_an_existing_file(tmp_path):
    both = _ppomq("eval")
    assert both.returncode == 2 and "exactly one" in both.stderr
    missing = _ppomq("eval", "--weights", str(tmp_path / "nope.pt"))
    assert missing.returncode == 3 and "Traceback" not in missing.stderr


def test_weights_and_normalization_statistics_for_another_env_are_one_line(redis_url, tmp_path):
    spec = {**SPEC, "obs_shape": [3], "action": {"kind": "gaussian", "shape": [1]},
            "obs_norm": {"clip": 10.0, "epsilon": 1e-8}}  # fmt: skip
    header, blob = pack_weights(1, numpy_state(build_model(spec)), model=spec,
                                extra={"env_id": "Pendulum-v1", "run_id": "ev2"})  # fmt: skip
    WeightStore(connect_redis(redis_url), "ev2").publish(header, blob)
    out = tmp_path / "v1.pt"
    assert _ppomq("weights", "export", "1", "-o", str(out), "--redis-url", redis_url,
                  "--run-id", "ev2").returncode == 0  # fmt: skip
    wrong = _ppomq("eval", "--weights", str(out), "--env-id", "CartPole-v1", "--episodes", "1")
    assert wrong.returncode == 2, wrong.stderr
    assert "normalization statistics" in wrong.stderr and "--env-id" in wrong.stderr
    assert "Traceback" not in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
    right = _ppomq("eval", "--weights", str(out), "--episodes", "1", "--json")
    assert right.returncode == 0 and json.loads(right.stdout)["env_id"] == "Pendulum-v1"


def _crafted_pickle(path, marker):
    """A .pt-named pickle whose loading would create `marker` (any code could run)."""
    import pickle

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path.write_bytes(pickle.dumps({"metadata": Payload(), "state_dict": {}}))


def test_a_weights_file_that_needs_unpickling_code_is_refused_without_running_it(tmp_path):
    evil, marker = tmp_path / "evil.pt", tmp_path / "payload-ran"
    _crafted_pickle(evil, marker)
    refused = _ppomq("eval", "--weights", str(evil), "--episodes", "1")
    assert not marker.exists(), "the file's pickle payload ran"
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert str(evil) in lines[0] and "not a ppomq weights file" in lines[0]
    assert "arbitrary code" in lines[0]


def test_a_run_dirs_final_weights_evaluate_under_the_safe_loader(tmp_path):
    from ppomq.learner.finish import save_final_weights

    torch.manual_seed(0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    meta = {"version": 4, "env_id": "CartPole-v1", "run_id": "fw", "env_steps": 256,
            "model": SPEC}  # fmt: skip
    save_final_weights(run_dir / "final_weights.pt", build_model(SPEC), meta)
    torch.load(run_dir / "final_weights.pt", weights_only=True)  # what eval reads it with
    result = _ppomq("eval", "--run-dir", str(run_dir), "--episodes", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["version"] == 4


def test_a_file_that_is_not_torch_at_all_is_one_line(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"hello, not a checkpoint")
    result = _ppomq("eval", "--weights", str(junk))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert str(junk) in result.stderr and "not a ppomq weights file" in result.stderr


def test_a_run_dir_without_final_weights_points_to_exporting_its_newest_version(tmp_path):
    """A live run (or one stopped before its end) has no final_weights.pt: the error names
    the commands that evaluate what it has, not just the missing file."""
    result = _ppomq("eval", "--run-dir", str(tmp_path))
    assert result.returncode != 0
    (line,) = result.stderr.splitlines()
    assert "no final_weights.pt yet" in line
    assert f"ppomq weights export --run-dir {tmp_path} latest -o latest.pt" in line
    assert "ppomq eval --weights latest.pt" in line
