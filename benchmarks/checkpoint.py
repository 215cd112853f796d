"""What a verified checkpoint costs: the learner's checkpoint write (checksummed payload,
fsync, read back and verified, the previous one kept) against a plain `torch.save` to a
temp file and a rename, for the CartPole MLP and the Atari CNN with Adam's moments.

    python -m benchmarks.checkpoint [--rounds 30]

Each round times both writers, order alternating; medians, written to
benchmarks/results/checkpoint.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks import harness
from ppomq.core.envs import rollout_spec_for
from ppomq.core.models import build_model, model_spec_for
from ppomq.core.settings import LearnerSettings, load_settings
from ppomq.learner.checkpoint import weights_digest, write_checkpoint
from ppomq.learner.trainer import PPOConfig, PPOTrainer

MODELS = {"CartPole-v1 MLP 64x64": "CartPole-v1", "Breakout Nature CNN": "ALE/Breakout-v5"}


def _state(env_id: str) -> tuple[dict[str, Any], PPOTrainer]:
    """A checkpoint's state for `env_id`'s default model, with Adam's moments."""
    spec = rollout_spec_for(env_id, run_id="bench", num_steps=8, max_bytes=1 << 30)
    settings = load_settings(LearnerSettings, {"env_id": env_id})
    policy = build_model(model_spec_for(spec, arch=settings.arch, hidden=settings.hidden))
    trainer = PPOTrainer(policy=policy, config=PPOConfig.from_settings(settings))
    trainer.optimizer.step(1e-4)  # Adam's moments: flat buffers as large as the weights
    state = {"trainer": trainer.get_state(), "version": 1, "counters": {}}
    return state, trainer


def _plain(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def _verified(path: Path, state: dict[str, Any], trainer: PPOTrainer) -> None:
    # As the learner does when no publish gave it the digest: the weights packed again.
    write_checkpoint(path, state, weights_sha256=weights_digest(trainer.host_state()))


def _timed_write(
    arm: str, _round: int, *, root: Path, state: dict[str, Any], trainer: PPOTrainer
) -> float:
    """Seconds for one write of `arm` ("plain" or "verified")."""
    path = root / arm / "ckpt.pt"
    path.parent.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    _plain(path, state) if arm == "plain" else _verified(path, state, trainer)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    harness.add_lock_option(ap)
    args = ap.parse_args(argv)
    bench_run = harness.Run("checkpoint", argv)
    torch.set_num_threads(1)
    rows = []
    with (
        harness.BenchLock(args.lock),
        tempfile.TemporaryDirectory(dir=".") as tmp,
    ):  # the run dir's disk
        for label, env_id in MODELS.items():
            state, trainer = _state(env_id)

            write = partial(_timed_write, root=Path(tmp), state=state, trainer=trainer)
            times = harness.interleave(("plain", "verified"), args.rounds, write)
            size = (Path(tmp) / "verified" / "ckpt.pt").stat().st_size
            plain, verified = (statistics.median(times[a]) * 1e3 for a in ("plain", "verified"))
            rows.append({"model": label, "bytes": size, "plain_ms": round(plain, 2),
                         "verified_ms": round(verified, 2),
                         "ratio": round(verified / plain, 2)})  # fmt: skip
    command = harness.command_line("checkpoint", argv)
    doc = {"command": command, "machine": harness.machine(torch_threads=1),
           "date": harness.utc_now(), "rounds": args.rounds, "rows": rows}  # fmt: skip
    lines = [
        "# Checkpoint write: verified against plain",
        "",
        f"`{command}` on {harness.machine_line(doc['machine'])}: median of {args.rounds} rounds, "
        "arms alternating; torch on 1 thread; the run dir's disk.",
        "",
        "| model (with Adam moments) | file | torch.save + rename | verified write | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['bytes'] / 1e6:.2f} MB | {r['plain_ms']:.2f} ms | "
                     f"{r['verified_ms']:.2f} ms | {r['ratio']:.2f}x |")  # fmt: skip
    print(harness.write_results(harness.RESULTS, "checkpoint", doc, "\n".join(lines), bench_run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
