"""The learner on a device (`--device`, `--torch-threads`): device-generic training, tested
on the CPU here; the CUDA comparison runs where a GPU exists."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from ppomq.core.errors import UsageError
from ppomq.core.models import Policy, build_model, numpy_state
from ppomq.learner.device import HostToDevice, resolve_device, resolve_threads
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from ppomq.proto import RolloutBatch
from tests.support import free_port, wait_until

CARTPOLE = {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
            "hidden": [64, 64], "activation": "tanh", "obs_norm": None}  # fmt: skip
# Gaussian actions and observation normalization: log_std, the obs_norm buffers.
CHEETAH = {"arch": "mlp", "obs_shape": [5], "action": {"kind": "gaussian", "shape": [2]},
           "hidden": [16, 16], "activation": "tanh",
           "obs_norm": {"clip": 10.0, "epsilon": 1e-8}}  # fmt: skip
NO_CUDA = "no CUDA device on this machine"


def _batch(policy: Policy, seed: int, t: int = 16, n: int = 8) -> RolloutBatch:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(t, n, *policy.spec["obs_shape"])).astype(np.float32)
    with torch.no_grad():
        action, logp, value = policy.act(torch.from_numpy(obs.reshape(t * n, -1)))
    return RolloutBatch(
        run_id="r", actor_id="a", seq=seed, policy_version=0, env_id="X", num_envs=n,
        num_steps=t,
        arrays={
            "obs": obs, "actions": action.numpy().reshape(t, n, *action.shape[1:]),
            "logp": logp.numpy().reshape(t, n), "values": value.numpy().reshape(t, n),
            "rewards": rng.normal(size=(t, n)).astype(np.float32),
            "terminated": rng.random((t, n)) < 0.05, "truncated": np.zeros((t, n), bool),
            "final_values": np.zeros((t, n), np.float32),
            "bootstrap_value": np.zeros(n, np.float32),
        },
    )  # fmt: skip


def _train(spec, gradients: str, updates: int = 3, **device) -> tuple[PPOTrainer, list]:
    """`updates` PPO updates from the same seed; the trainer and each update's stats."""
    torch.manual_seed(0)
    policy = build_model(spec)
    batches = [[_batch(policy, 10 * u + i) for i in range(2)] for u in range(updates)]
    cfg = PPOConfig(update_epochs=3, minibatch_size=64, gradients=gradients, ent_coef=0.01,
                    clip_vloss=True, total_steps=10_000)  # fmt: skip
    trainer = PPOTrainer(policy=policy, config=cfg, **device)
    torch.manual_seed(1)
    stats = [trainer.update(b, env_steps=256 * i) for i, b in enumerate(batches)]
    return trainer, stats


# --------------------------------------------------------------------------- settings


def test_cpu_and_auto_resolve_to_the_cpu_here(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("choice", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_a_gpu_is_a_usage_error_naming_the_fix(monkeypatch, choice):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError) as err:
        resolve_device(choice)
    msg = str(err.value)
    assert "\n" not in msg and f"--device {choice}" in msg
    assert "--device cpu" in msg and "--device auto" in msg
    assert err.value.exit_code == 2


def test_torch_threads_zero_is_every_cpu_the_process_may_use():
    assert resolve_threads(3) == 3
    assert resolve_threads(0) == len(os.sched_getaffinity(0))


def test_device_setting_is_validated():
    from ppomq.core.settings import LearnerSettings, load_settings

    assert load_settings(LearnerSettings, {"device": "cuda:1"}).device == "cuda:1"
    assert load_settings(LearnerSettings, {}).device == "auto"
    assert load_settings(LearnerSettings, {}).torch_threads == 1  # the learner's old pin
    for bad in ("gpu", "cuda:", "CPU", "cuda:x"):
        with pytest.raises(UsageError, match="not a device; use auto, cpu, cuda or cuda:N"):
            load_settings(LearnerSettings, {"device": bad})
    with pytest.raises(UsageError, match="torch_threads"):
        load_settings(LearnerSettings, {"torch_threads": -1})


# --------------------------------------------------------------------------- the device path


@pytest.mark.parametrize("spec", [CARTPOLE, CHEETAH], ids=["cartpole", "gaussian-obsnorm"])
@pytest.mark.parametrize("gradients", ["analytic", "autograd"])
def test_device_cpu_trains_exactly_as_the_default(spec, gradients):
    """--device cpu (and auto, which is the CPU here) runs the device path: the same
    updates land on bit-identical parameters, optimizer moments and statistics."""
    default, s0 = _train(spec, gradients)
    on_cpu, s1 = _train(spec, gradients, device="cpu")
    auto, s2 = _train(spec, gradients, device=resolve_device("auto"))
    assert on_cpu.device == torch.device("cpu")
    for other, stats in ((on_cpu, s1), (auto, s2)):
        assert torch.equal(default.flat.data, other.flat.data)
        assert torch.equal(default.optimizer.exp_avg_sq, other.optimizer.exp_avg_sq)
        for a, b in zip(default.policy.state_dict().values(),
                        other.policy.state_dict().values(), strict=True):  # fmt: skip
            assert torch.equal(a, b)
        untimed = [{k: v for k, v in st.items() if not k.startswith("time/")} for st in stats]
        assert untimed == [{k: v for k, v in st.items() if not k.startswith("time/")} for st in s0]


def test_host_state_is_what_numpy_state_gives_and_the_checkpoint_is_host_tensors():
    trainer, _ = _train(CHEETAH, "analytic", updates=1, device="cpu")
    host = trainer.host_state()
    want = numpy_state(trainer.policy)
    assert list(host) == list(want)
    for k in want:
        assert isinstance(host[k], np.ndarray)
        np.testing.assert_array_equal(host[k], want[k])
    state = trainer.get_state()
    tensors = [*state["policy"].values(), state["optimizer"]["exp_avg"]]
    assert all(t.device.type == "cpu" for t in tensors)


def test_host_to_device_on_the_cpu_is_no_copy():
    a = np.arange(6, dtype=np.float32)
    t = HostToDevice(torch.device("cpu"))(a)
    assert t.data_ptr() == a.ctypes.data


def test_flat_unflatten_gives_views_by_name():
    from ppomq.learner.flat_params import FlatParameters

    policy = build_model(CHEETAH)
    flat = FlatParameters(policy)
    copy = flat.data.clone()
    views = flat.unflatten(copy)
    assert list(views) == [n for n, _ in policy.named_parameters()]
    for name, p in policy.named_parameters():
        assert torch.equal(views[name], p.detach())
        assert views[name].data_ptr() >= copy.data_ptr()  # a view of the copy


# --------------------------------------------------------------------------- CUDA


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("spec", [CARTPOLE, CHEETAH], ids=["cartpole", "gaussian-obsnorm"])
@pytest.mark.parametrize("gradients", ["analytic", "autograd"])
def test_cuda_trains_as_the_cpu_does_to_tolerance(spec, gradients):
    """One minibatch per epoch: no shuffle, whose random stream differs on CUDA."""
    torch.manual_seed(0)
    policy = build_model(spec)
    batches = [[_batch(policy, 10 * u + i) for i in range(2)] for u in range(3)]
    cfg = PPOConfig(update_epochs=3, minibatch_size=0, gradients=gradients, anneal_lr=False)
    trainers = []
    for device in ("cpu", "cuda"):
        p = build_model(spec)
        p.load_state_dict(policy.state_dict())
        t = PPOTrainer(policy=p, config=cfg, device=device)
        for b in batches:
            t.update(b, 0)
        trainers.append(t)
    cpu, gpu = trainers
    assert gpu.flat.data.is_cuda and gpu.optimizer.exp_avg.is_cuda
    torch.testing.assert_close(gpu.flat.data.cpu(), cpu.flat.data, rtol=1e-4, atol=1e-5)
    host = gpu.host_state()
    for k, v in cpu.host_state().items():
        np.testing.assert_allclose(host[k], v, rtol=1e-4, atol=1e-5)
    # A checkpoint of the GPU learner loads on a CPU one (host tensors, weights_only).
    buf = io.BytesIO()
    torch.save(gpu.get_state(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    p = build_model(spec)
    resumed = PPOTrainer(policy=p, config=cfg, device="cpu")
    resumed.set_state(state)
    torch.testing.assert_close(resumed.flat.data, gpu.flat.data.cpu())
    assert gpu.host_policy().v[0].weight.device.type == "cpu"


# --------------------------------------------------------------------------- the real CLI


def _ppomq(*args: str) -> list[str]:
    return [sys.executable, "-m", "ppomq.cli", *args]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_learner_device_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path):
    res = subprocess.run(
        _ppomq("learner", "--device", "cuda", "--run-dir", str(tmp_path / "run")),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = (res.stdout + res.stderr).splitlines()
    assert res.returncode == 2, res
    assert len(lines) == 1, lines
    assert lines[0].startswith("ppomq: error: --device cuda: CUDA is not available here")
    assert "--device cpu" in lines[0] and "Traceback" not in lines[0]
    assert not (tmp_path / "run").exists()  # nothing started


@pytest.mark.parametrize(("flag", "want"), [("2", 2), ("0", len(os.sched_getaffinity(0)))])
def test_learner_logs_its_device_and_applied_threads_at_start(tmp_path, flag, want):
    """The start line says the device and torch.get_num_threads() as the process has it;
    the setting comes in as a PPOMQ_* variable, as in k8s. No Redis: the line comes first."""
    env = dict(os.environ, PPOMQ_TORCH_THREADS=flag, PPOMQ_DEVICE="cpu")
    args = _ppomq("learner", "--run-dir", str(tmp_path / "run"),
                  "--redis-url", f"redis://127.0.0.1:{free_port()}/0")  # fmt: skip
    log = tmp_path / "learner.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)

    def start_line() -> str | None:
        return next((x for x in log.read_text().splitlines() if "learner on " in x), None)

    def running_or_said_it() -> None:
        assert proc.poll() is None or start_line(), (
            f"exited ({proc.returncode}):\n{log.read_text()}"
        )

    try:
        line = wait_until(start_line, 60, "the learner's start line", check=running_or_said_it,
                          context=log.read_text)  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    assert f"learner on cpu (--device cpu), {want} CPU thread(s) (--torch-threads {flag})" in line


@pytest.mark.parametrize(
    ("cpu_max", "cores"),
    [("150000 100000\n", 2), ("50000 100000\n", 1), ("max 100000\n", None), (None, None)],
)
def test_torch_threads_zero_stays_within_the_containers_cpu_quota(tmp_path, cpu_max, cores):
    """`docker run --cpus 1.5` or a pod's CPU limit of 1.5 on a big host: 2 threads, not one
    per host CPU queueing for the quota."""
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max)
    every = len(os.sched_getaffinity(0))
    assert resolve_threads(0, cpu_max=path) == (every if cores is None else min(every, cores))
    assert resolve_threads(3, cpu_max=path) == 3
