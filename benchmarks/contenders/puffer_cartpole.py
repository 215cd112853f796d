"""PufferLib 3.0.0's own trainer (PuffeRL) on its C CartPole (Ocean's puffer_cartpole).

    .venv-puffer/bin/python -m benchmarks.contenders.puffer_cartpole --config matched \
        --seed 1 --total-steps 2000000 [--num-envs 1024] [--horizon 64] [--run-dir DIR]

Run with the repository root on PYTHONPATH (it imports benchmarks.contenders.common,
standard library only), from a folder of its own: importing pufferlib links `resources`
into the working directory. Its venv comes from benchmarks/contenders/puffer_setup.sh.
Both configs start from PufferLib's config for puffer_cartpole (config/default.ini +
config/ocean/cartpole.ini) on the CPU, one process (vec backend Serial, one vector env of
--num-envs C envs, stepped by one C call), one torch thread, and a batch of --num-envs x
--horizon samples:

* `matched`: what ppomq runs in benchmarks/puffer_tax.py: ppomq's MLP (separate policy and
  value networks, --hidden sizes, tanh, orthogonal init; no LSTM), Adam (betas 0.9/0.999,
  eps 1e-5, as ppomq's learner) at a constant --learning-rate, prioritized replay off
  (prio_alpha 0: every segment equally likely, weights 1), one epoch of --minibatch-size
  minibatches; the rest PufferLib's cartpole settings (gamma 0.95, gae_lambda 0.90, clip
  0.2, vf_coef 2.0, vf_clip 0.2, ent_coef 0.001, max_grad_norm 1.5).
* `defaults`: PufferLib's config as it ships, only the batch shape set: its LSTM policy
  (Policy + Recurrent), Muon at lr 0.05, prioritized replay, cosine annealing.

The loop is `pufferlib.pufferl.train`'s (evaluate, train, until total_timesteps), timed
here, without the 32 or more extra evaluate() calls train() makes after training (2M more
env steps at this shape, no learning), so that the command's time is the training's.
Prints one `E2E_RESULT {json}` line: Unix times (script start, imports done, first env
step, training end, exit), env steps, the time split (evaluate: env + forward + copies;
train: the update) and a curve of the mean episode length per epoch (PufferLib's `score`).
"""

from __future__ import annotations

import time

T_START = time.time()  # before the heavy imports: the harness also times process start

import argparse  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

import pufferlib  # noqa: E402
import pufferlib.pufferl as pufferl  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.contenders.common import emit, thin  # noqa: E402

T_IMPORTED = time.time()
ENV_NAME = "puffer_cartpole"
CONFIGS = ("matched", "defaults")

# What `matched` changes in PufferLib's config (the rest stays as it ships).
MATCHED_TRAIN: dict[str, Any] = {
    "optimizer": "adam",
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-5,
    "anneal_lr": False,
    "prio_alpha": 0.0,  # advantages**0 = 1: uniform segments, importance weights 1
    "prio_beta0": 1.0,
    "update_epochs": 1,
}


def _linear(n_in: int, n_out: int, gain: float) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _stack(n_in: int, hidden: list[int], n_out: int, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip([n_in, *hidden], hidden, strict=False):
        layers += [_linear(a, b, math.sqrt(2)), nn.Tanh()]
    return nn.Sequential(*layers, _linear(([n_in, *hidden])[-1], n_out, out_gain))


class MatchedMLP(nn.Module):
    """ppomq's `arch: mlp` (src/ppomq/core/models/mlp.py) in PufferLib's policy interface:
    separate policy and value MLPs, tanh, orthogonal init (gains sqrt 2, policy head 0.01,
    value head 1), zero biases."""

    def __init__(self, env: Any, hidden: list[int]) -> None:
        super().__init__()
        n_obs = int(math.prod(env.single_observation_space.shape))
        self.pi = _stack(n_obs, hidden, int(env.single_action_space.n), 0.01)
        self.v = _stack(n_obs, hidden, 1, 1.0)

    def forward_eval(self, observations: torch.Tensor, state: Any = None) -> Any:
        x = observations.flatten(1).float()
        return self.pi(x), self.v(x)

    def forward(self, observations: torch.Tensor, state: Any = None) -> Any:
        return self.forward_eval(observations, state)


def load_args(a: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    """PufferLib's config for puffer_cartpole (its own loader), then the settings here."""
    argv, sys.argv = sys.argv, [sys.argv[0]]  # load_config parses sys.argv
    try:
        args = pufferl.load_config(ENV_NAME)
    finally:
        sys.argv = argv
    args["vec"].update(backend="Serial", num_envs=1, num_workers=1, batch_size=1, seed=a.seed)
    args["env"]["num_envs"] = a.num_envs
    train = args["train"]
    train.update(
        device="cpu",
        seed=a.seed,
        total_timesteps=a.total_steps,
        bptt_horizon=a.horizon,
        batch_size=a.num_envs * a.horizon,
        data_dir=run_dir,
    )
    if a.config == "matched":
        train.update(MATCHED_TRAIN, learning_rate=a.learning_rate, minibatch_size=a.minibatch_size)
        args["rnn_name"] = None
        train["use_rnn"] = False
    train["minibatch_size"] = min(train["minibatch_size"], train["batch_size"])
    return args


class EpisodeCurve:
    """The mean episode length of each epoch from PufferLib's env logs (`vec_log` means
    over the `n` envs that finished since the last step), weighted by `n`."""

    def __init__(self) -> None:
        self.points: list[tuple[int, float, float, int]] = []  # steps, unix, mean, episodes
        self.episodes = 0
        self._stats: Any = None
        self._seen = 0

    def add(self, stats: Any, env_steps: int) -> None:
        if stats is not self._stats:  # PufferLib starts a fresh dict after each log
            self._stats, self._seen = stats, 0
        lengths, counts = stats.get("episode_length", []), stats.get("n", [])
        if not isinstance(lengths, list) or not isinstance(counts, list):
            return  # already reduced to means by its logger
        new = list(zip(lengths[self._seen :], counts[self._seen :], strict=False))
        self._seen = len(lengths)
        n = sum(c for _, c in new)
        if n:
            self.episodes += int(n)
            self.points.append((env_steps, time.time(), sum(m * c for m, c in new) / n, int(n)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=CONFIGS, default="matched")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=2_000_000)
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--horizon", type=int, default=64, help="bptt_horizon: steps per segment")
    p.add_argument("--minibatch-size", type=int, default=32768, help="matched only")
    p.add_argument("--learning-rate", type=float, default=0.003, help="matched only")
    p.add_argument("--hidden", default="64,64", help="matched only: hidden layer sizes")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--run-dir", default="", help="checkpoints; empty: a temporary folder")
    a = p.parse_args()
    torch.set_num_threads(a.torch_threads)
    torch.manual_seed(a.seed)  # PuffeRL leaves torch unseeded
    run_dir = a.run_dir or os.path.join("/tmp", f"puffer-cartpole-{os.getpid()}")
    args = load_args(a, run_dir)
    vecenv = pufferl.load_env(ENV_NAME, args)
    if a.config == "matched":
        policy = MatchedMLP(vecenv.driver_env, [int(h) for h in a.hidden.split(",")])
    else:
        policy = pufferl.load_policy(args, vecenv)
    config = dict(**args["train"], env=ENV_NAME)
    trainer = pufferl.PuffeRL(config, vecenv, policy)
    curve = EpisodeCurve()
    eval_s = train_s = 0.0
    epochs = 0
    first_step_unix = time.time()
    while trainer.global_step < config["total_timesteps"]:
        t0 = time.perf_counter()
        stats = trainer.evaluate()
        curve.add(stats, trainer.global_step)
        t1 = time.perf_counter()
        trainer.train()
        eval_s += t1 - t0
        train_s += time.perf_counter() - t1
        epochs += 1
    train_end = time.time()
    trainer.close()
    end = time.time()
    emit(
        {
            "contender": f"pufferlib-{a.config}",
            "pufferlib_version": pufferlib.__version__,
            "config": a.config,
            "train_config": {
                k: v for k, v in sorted(config.items()) if isinstance(v, int | float | str | bool)
            },
            "policy": type(policy).__name__,
            "params": sum(q.numel() for q in policy.parameters()),
            "num_envs": a.num_envs,
            "torch_threads": torch.get_num_threads(),
            "script_start_unix": T_START,
            "imports_done_unix": T_IMPORTED,
            "first_step_unix": first_step_unix,
            "train_end_unix": train_end,
            "end_unix": end,
            "env_steps": int(trainer.global_step),
            "epochs": epochs,
            "episodes": curve.episodes,
            "time_split_s": {"evaluate": round(eval_s, 3), "train": round(train_s, 3)},
            "curve": thin([[s, round(t, 3), round(m, 2), n] for s, t, m, n in curve.points]),
        }
    )


if __name__ == "__main__":
    main()
