"""Where the learner computes (`--device`) and with how many CPU threads (`--torch-threads`).

The device is resolved once, at the learner's start: `auto` is CUDA when torch sees a GPU,
else the CPU; `cuda` (or `cuda:N`) where there is none is a one-line usage error naming
the fix. Everything after that takes a `torch.device` and is device-generic: the model and
the optimizer's state live there, the batch goes there once per update
(`HostToDevice`), and weights come back to the host once per publish
(trainer.PPOTrainer.host_state).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ppomq.core.errors import UsageError


def resolve_device(choice: str) -> torch.device:
    """The torch device for a `--device` value: auto, cpu, cuda or cuda:N."""
    if choice == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if choice == "auto":
        return torch.device("cuda" if available else "cpu")
    if not available:
        why = (
            f"torch {torch.__version__} is a CPU-only build"
            if torch.version.cuda is None
            else "torch sees no GPU"
        )
        raise UsageError(
            f"--device {choice}: CUDA is not available here ({why}); pass --device cpu, or "
            "--device auto to use a GPU only where there is one"
        )
    device = torch.device(choice)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise UsageError(
            f"--device {choice}: this machine has {count} CUDA device(s) (cuda:0 to "
            f"cuda:{count - 1}); pass one of them, or --device cuda"
        )
    return device


# cgroup v2's CPU quota of this process's container (`docker run --cpus`, a pod's CPU
# limit): "QUOTA PERIOD" in microseconds, or "max PERIOD" for none.
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def resolve_threads(setting: int, *, cpu_max: Path = CPU_MAX) -> int:
    """The CPU threads `--torch-threads` asks for: itself, or for 0 the cores this process
    may use: the CPUs it may run on (its affinity mask: a container's cpuset, taskset), not
    the host's count, and no more than its container's CPU quota (rounded up), since more
    threads than the quota only queue for it."""
    if setting > 0:
        return setting
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cpu_quota(cpu_max)
    return max(1, min(cpus, quota)) if quota is not None else cpus


def _cpu_quota(path: Path) -> int | None:
    """Cores the cgroup's quota allows, rounded up; None without one (or no cgroup v2)."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        return None


def describe(device: torch.device) -> str:
    """`cpu`, or `cuda:0 (NVIDIA H100 80GB HBM3)` for the start log line."""
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


class HostToDevice:
    """numpy arrays -> tensors on `device`. On the CPU, `torch.from_numpy` (no copy); on
    CUDA, through pinned host memory with a non-blocking copy, so that the copies of one
    batch are queued back to back and overlap with the host's work on the next array."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def __call__(self, array: np.ndarray) -> Tensor:
        t = torch.from_numpy(np.ascontiguousarray(array))
        if not self.cuda:
            return t
        # The caching host allocator keeps a pinned block alive until the copy that reads
        # it has completed, so the staging tensor may go out of scope at once.
        return t.pin_memory().to(self.device, non_blocking=True)
