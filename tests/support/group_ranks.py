"""Real learner-group ranks for tests: one spawned process per rank, each a PPOTrainer in
a torch.distributed (gloo) group, training on batches the test chose for it."""

from __future__ import annotations

import multiprocessing as mp
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ppomq.core.models import Policy, build_model
from ppomq.proto import RolloutBatch

SPEC = {"arch": "mlp", "obs_shape": [3], "action": {"kind": "categorical", "n": 2},
        "hidden": [16], "activation": "tanh",
        "obs_norm": {"clip": 10.0, "epsilon": 1e-8}}  # fmt: skip


def make_batch(policy: Policy, *, seed: int, t: int = 16, n: int = 4) -> RolloutBatch:
    """A batch acted by `policy`: action 1 is rewarded, episodes end now and then."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)  # the actions sampled: the same batch whichever rank makes it
    obs = rng.normal(loc=1.0, size=(t, n, 3)).astype(np.float32)
    with torch.no_grad():
        action, logp, value = policy.act(policy.preprocess(torch.from_numpy(obs.reshape(-1, 3))))
    actions = action.numpy().reshape(t, n)
    rewards = (actions == 1).astype(np.float32) + rng.normal(size=(t, n)).astype(np.float32)
    return RolloutBatch(
        run_id="r", actor_id=f"a{seed}", seq=seed, policy_version=0, env_id="X", num_envs=n,
        num_steps=t,
        arrays={
            "obs": obs, "actions": actions.astype(np.int64),
            "logp": logp.numpy().reshape(t, n), "values": value.numpy().reshape(t, n),
            "rewards": rewards,
            "terminated": rng.random((t, n)) < 0.05, "truncated": np.zeros((t, n), bool),
            "final_values": np.zeros((t, n), np.float32),
            "bootstrap_value": np.zeros(n, np.float32),
        },
    )  # fmt: skip


def fresh_policy() -> Policy:
    torch.manual_seed(0)
    return build_model(SPEC)


def batches_for(seeds: list[int]) -> list[RolloutBatch]:
    policy = fresh_policy()
    return [make_batch(policy, seed=s) for s in seeds]


def trained_state(trainer: Any) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in trainer.policy.state_dict().items()}


def _rank_main(rank: int, world: int, port: int, plan: list[list[int]], config: dict,
               out: str) -> None:  # fmt: skip
    from ppomq.learner.group import GroupSpec, LearnerGroup
    from ppomq.learner.trainer import PPOConfig, PPOTrainer

    torch.set_num_threads(1)
    spec = GroupSpec(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port)
    group = LearnerGroup(spec, backend="gloo", timeout_s=30, device=torch.device("cpu"))
    torch.manual_seed(1000 + rank)  # shuffles differ by rank; the parameters must not
    trainer = PPOTrainer(policy=fresh_policy(), config=PPOConfig(**config), group=group)
    states, stats = [], []
    for seeds in plan:  # one update per entry: this rank's batches for it
        stats.append(trainer.update(batches_for(seeds), env_steps=0))
        states.append(trained_state(trainer))
    group.close()
    Path(out).write_bytes(pickle.dumps({"states": states, "stats": stats}))


def run_group(plans: list[list[list[int]]], config: dict, tmp: Path, port: int) -> list[dict]:
    """Run len(plans) ranks; plans[r][u]: rank r's batch seeds for update u. Returns each
    rank's {"states": [state after update u], "stats": [...]}."""
    ctx = mp.get_context("spawn")
    world = len(plans)
    outs = [str(tmp / f"rank{r}.pkl") for r in range(world)]
    procs = [
        ctx.Process(target=_rank_main, args=(r, world, port, plans[r], config, outs[r]))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert codes == [0] * world, f"ranks exited {codes}"
    return [pickle.loads(Path(o).read_bytes()) for o in outs]
