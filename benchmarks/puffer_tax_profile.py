"""Where ppomq's time goes on one PufferLib-shaped batch (N envs x T steps of PufferLib's C
CartPole), each part timed alone in this process with ppomq's own code:

* actor: `EnvRunner.sample` split into the vector env's `step` (Gymnasium's SyncVectorEnv
  over the shim's envs, benchmarks/contenders/puffer_cartpole_env.py), the policy's `act`
  and the runner's own work (buffers, episode ends, truncation values); then `encode`.
* wire: one encoded batch through ppomq's RolloutSender -> RolloutReceiver over tcp
  loopback, one in flight, plain and with CURVE (`ppomq train`'s default).
* learner: `decode` (validation included), the episode check (EpisodeBook.verify), and
  `PPOTrainer.update` split as the learner logs it (targets, SGD).
* for reference, the same N envs stepped T times by PufferLib's one C call (`vec_step`),
  which is how PufferLib's trainer steps them; and `EnvRunner.sample` once more with the
  envs behind that one call (the shim's PufferCartPoleVector, which ppomq's actor cannot
  select): what an actor would take with a vector env backend.

    .venv/bin/python -m benchmarks.puffer_tax_profile [--batches 5] [--num-envs 1024] [--horizon 64]

Prints one JSON object; benchmarks/puffer_tax.py runs it and puts it in its report.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

HIDDEN = [64, 64]


class _Timed:
    """A stand-in for `target` that adds the time spent in `method` to `seconds`."""

    def __init__(self, target: Any, method: str) -> None:
        self._target = target
        self._method = getattr(target, method)
        self.seconds = 0.0
        setattr(self, method, self._call)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._method(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(1000 * statistics.median(times), 3)


def model_spec(hidden: list[int]) -> dict[str, Any]:
    return {"arch": "mlp", "obs_shape": [4], "action": {"kind": "categorical", "n": 2},
            "hidden": hidden, "activation": "tanh", "obs_norm": None}  # fmt: skip


def actor_parts(
    num_envs: int, horizon: int, batches: int, *, vector: bool = False
) -> tuple[dict[str, float], list]:
    """Per batch (ms, medians): sample (env step, policy act, the runner's own), encode.
    `vector`: the envs step in one C call (PufferCartPoleVector) instead of Gymnasium's
    SyncVectorEnv over the shim's envs, which is what ppomq's actor builds."""
    from benchmarks.contenders.puffer_cartpole_env import ENV_ID, PufferCartPoleVector
    from ppomq.actor.runner import EnvRunner
    from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
    from ppomq.core.models import build_model
    from ppomq.proto import encode

    env_id = f"benchmarks.contenders.puffer_cartpole_env:{ENV_ID}"
    spec = rollout_spec_for(env_id, run_id="bench", num_steps=horizon, max_bytes=1 << 30)
    if vector:
        raw: Any = PufferCartPoleVector(num_envs, seed=1)
        raw.reset()
    else:
        raw = make_vector_env(env_id, num_envs, [env_seed(1, 0, i) for i in range(num_envs)])
    envs = _Timed(raw, "step")
    runner = EnvRunner(envs=envs, spec=spec, run_id="bench", actor_id="a0", env_id=env_id)
    policy = _Timed(build_model(model_spec(HIDDEN)).inference(), "act")
    rows: dict[str, list[float]] = {k: [] for k in ("sample", "env_step", "policy_act", "encode")}
    made = []
    runner.sample(policy, policy_version=0, seq=0)  # warm-up
    for i in range(batches):
        env0, act0 = envs.seconds, policy.seconds
        t0 = time.perf_counter()
        batch = runner.sample(policy, policy_version=0, seq=i + 1)
        rows["sample"].append(time.perf_counter() - t0)
        rows["env_step"].append(envs.seconds - env0)
        rows["policy_act"].append(policy.seconds - act0)
        t0 = time.perf_counter()
        frames = encode(batch)
        rows["encode"].append(time.perf_counter() - t0)
        made.append((batch, frames))
    envs.close()
    ms = {k: round(1000 * statistics.median(v), 3) for k, v in rows.items()}
    ms["runner_own"] = round(ms["sample"] - ms["env_step"] - ms["policy_act"], 3)
    return ms, made


def wire_ms(frames: list[Any], repeats: int, curve: bool) -> float:
    """One batch through ppomq's sockets (tcp loopback), send to received, median ms."""
    from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender

    with tempfile.TemporaryDirectory(prefix="ppomq-bench-") as tmp:
        server = client = None
        if curve:
            from benchmarks.transport import _curve_keys

            server, client = _curve_keys(tmp)
        rx = RolloutReceiver("tcp://127.0.0.1:0", curve=server)
        try:
            with RolloutSender(rx.endpoint, curve=client) as tx:

                def one() -> None:
                    if not tx.send(frames, timeout_ms=30_000):
                        raise RuntimeError("send timed out")
                    got = None
                    while got is None:
                        got = rx.recv(timeout_ms=30_000)

                one()  # the handshake
                return _median_ms(one, repeats)
        finally:
            rx.close()


def learner_parts(made: list, horizon: int, minibatch: int, repeats: int) -> dict[str, float]:
    """Per batch (ms, medians): decode + validation, the episode check, targets, SGD."""
    from benchmarks.puffer_tax import ppo_config
    from ppomq.core.envs import rollout_spec_for
    from ppomq.core.models import build_model
    from ppomq.learner.episodes import EpisodeBook
    from ppomq.learner.trainer import PPOTrainer
    from ppomq.proto import SeqTracker, decode

    batch0, frames0 = made[0]
    wire = [bytes(memoryview(f)) for f in frames0]  # as received: bytes, not the arrays
    spec = rollout_spec_for(batch0.env_id, run_id="bench", num_steps=horizon, max_bytes=1 << 30)
    dec = _median_ms(lambda: decode(wire, spec, SeqTracker()), repeats)

    def verify() -> None:
        EpisodeBook().verify(decode(wire, spec))

    ver = round(_median_ms(verify, repeats) - dec, 3)
    trainer = PPOTrainer(policy=build_model(model_spec(HIDDEN)), config=ppo_config(minibatch))
    trainer.update([made[0][0]], 0)  # warm-up
    targets, sgd = [], []
    for i in range(repeats):
        st = trainer.update([made[i % len(made)][0]], 0)
        targets.append(st["time/learner_targets"])
        sgd.append(st["time/learner_sgd"])
    return {
        "decode": dec,
        "episode_check": ver,
        "targets": round(1000 * statistics.median(targets), 3),
        "sgd": round(1000 * statistics.median(sgd), 3),
    }


def c_vector_step_ms(num_envs: int, horizon: int, repeats: int) -> float:
    """N C envs stepped T times by PufferLib's one call per step (vec_step)."""
    from benchmarks.contenders.puffer_cartpole_env import load_binding

    b = load_binding()
    obs = np.zeros((num_envs, 4), np.float32)
    act = np.zeros(num_envs, np.float32)
    rew = np.zeros(num_envs, np.float32)
    term, trunc = np.zeros(num_envs, np.uint8), np.zeros(num_envs, np.uint8)
    handle = b.vec_init(obs, act, rew, term, trunc, num_envs, 1, continuous=0)
    b.vec_reset(handle, 1)
    actions = np.random.default_rng(0).integers(0, 2, (horizon, num_envs)).astype(np.float32)

    def rollout() -> None:
        for t in range(horizon):
            act[:] = actions[t]
            b.vec_step(handle)

    try:
        return _median_ms(rollout, repeats)
    finally:
        b.vec_close(handle)


def profile(num_envs: int, horizon: int, minibatch: int, batches: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    torch.manual_seed(1)
    actor, made = actor_parts(num_envs, horizon, batches)
    frames = made[0][1]
    return {
        "num_envs": num_envs,
        "horizon": horizon,
        "minibatch_size": minibatch,
        "batches": batches,
        "batch_bytes": sum(len(memoryview(f).cast("B")) for f in frames),
        "actor_ms": actor,
        "actor_vector_ms": actor_parts(num_envs, horizon, batches, vector=True)[0],
        "wire_ms": {
            "plain": wire_ms(frames, batches, curve=False),
            "curve": wire_ms(frames, batches, curve=True),
        },
        "learner_ms": learner_parts(made, horizon, minibatch, batches),
        "c_vector_step_ms": c_vector_step_ms(num_envs, horizon, batches),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--horizon", type=int, default=64)
    p.add_argument("--minibatch-size", type=int, default=32768)
    a = p.parse_args(argv)
    print(json.dumps(profile(a.num_envs, a.horizon, a.minibatch_size, a.batches)))


if __name__ == "__main__":
    main()
