"""PPOTrainer: turns accepted rollout batches into one PPO update (no sockets, no Redis)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from ppomq.core.errors import UsageError
from ppomq.core.models import Policy, build_model
from ppomq.learner.device import HostToDevice
from ppomq.learner.flat_params import FlatAdam, FlatParameters
from ppomq.learner.gae import compute_gae
from ppomq.learner.gradients import Minibatch, SequenceMinibatch, select_gradient
from ppomq.learner.ppo_loss import PPOLossStats, adapt_kl_coef, normalize_advantages
from ppomq.learner.returns_norm import ReturnNormalizer
from ppomq.learner.sequences import from_rows, sequence_arrays, to_rows
from ppomq.learner.vtrace import compute_vtrace
from ppomq.proto import RolloutBatch

if TYPE_CHECKING:
    from ppomq.learner.group import LearnerGroup

# Samples per forward pass when V-trace re-evaluates a whole batch under the current policy:
# bounds the activations a large pixel batch would hold at once.
_EVAL_CHUNK = 4096


@dataclass(frozen=True, slots=True)
class PPOConfig:
    gamma: float = 0.98
    gae_lambda: float = 0.8
    targets: str = "gae"
    vtrace_rho_bar: float = 1.0
    vtrace_c_bar: float = 1.0
    learning_rate: float = 1e-3
    anneal_lr: bool = True
    anneal_lr_steps: int = 0
    total_steps: int = 0
    update_epochs: int = 20
    minibatch_size: int = 256
    shuffle_minibatches: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = False
    norm_adv: bool = True
    norm_returns: bool = False
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    objective: str = "clip"
    kl_penalty_target: float = 0.01
    kl_penalty_coef: float = 1.0
    gradients: str = "auto"

    @classmethod
    def from_settings(cls, settings: Any) -> PPOConfig:
        names = cls.__dataclass_fields__
        return cls(**{k: getattr(settings, k) for k in names})


def flatten_arrays(batches: list[RolloutBatch]) -> dict[str, np.ndarray]:
    """Every batch's obs, actions, logp and values, [T, N, ...] flattened to [T*N, ...]
    (time-major) and joined in batch order."""
    return {
        key: np.concatenate(
            [
                b.arrays[key].reshape(b.num_steps * b.num_envs, *b.arrays[key].shape[2:])
                for b in batches
            ]
        )
        for key in ("obs", "actions", "logp", "values")
    }


def rollout_order(batches: list[RolloutBatch]) -> np.ndarray:
    """Indices that put flatten_arrays' rows (time-major within each batch) in rollout
    order: batch after batch, env after env, each env's steps in time order."""
    parts, offset = [], 0
    for b in batches:
        steps = b.num_steps * b.num_envs
        parts.append(offset + np.arange(steps).reshape(b.num_steps, b.num_envs).T.reshape(-1))
        offset += steps
    return np.concatenate(parts)


# Maps the value head's outputs to returns (ReturnNormalizer.denormalize); None: they are.
Denormalize = Callable[[np.ndarray], np.ndarray]


def _as_returns(values: np.ndarray, denorm: Denormalize | None) -> np.ndarray:
    return values if denorm is None else denorm(values)


def gae_targets(
    batches: list[RolloutBatch], *, gamma: float, lam: float, denorm: Denormalize | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, returns) [sum of T*N], GAE per batch on the actor's values (mapped to
    returns by `denorm` when the value head learns normalized returns)."""
    out = [
        compute_gae(
            b.arrays["rewards"], _as_returns(b.arrays["values"], denorm), b.arrays["terminated"],
            b.arrays["truncated"], _as_returns(b.arrays["final_values"], denorm),
            _as_returns(b.arrays["bootstrap_value"], denorm), gamma=gamma, lam=lam,
        )
        for b in batches
    ]  # fmt: skip
    return np.concatenate([a.reshape(-1) for a, _ in out]), np.concatenate(
        [r.reshape(-1) for _, r in out]
    )


def vtrace_targets(
    batches: list[RolloutBatch],
    target_logp: np.ndarray,
    target_values: np.ndarray,
    *,
    gamma: float,
    rho_bar: float,
    c_bar: float,
    denorm: Denormalize | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, value targets) [sum of T*N], V-trace per batch for the policy whose
    log-probs and values over the flattened batches (flatten_arrays' order) are given.
    Observations the batch does not carry keep the actor's values (bootstrap_value,
    final_values). `denorm` maps every value, the given ones and the actor's, to returns."""
    target_values = _as_returns(target_values, denorm)
    advs, targets, start = [], [], 0
    for b in batches:
        t, n = b.num_steps, b.num_envs
        cut = slice(start, start + t * n)
        start += t * n
        a = b.arrays
        adv, v = compute_vtrace(
            a["rewards"], target_values[cut].reshape(t, n), a["terminated"], a["truncated"],
            _as_returns(a["final_values"], denorm), _as_returns(a["bootstrap_value"], denorm),
            a["logp"], target_logp[cut].reshape(t, n),
            gamma=gamma, rho_bar=rho_bar, c_bar=c_bar,
        )  # fmt: skip
        advs.append(adv.reshape(-1))
        targets.append(v.reshape(-1))
    return np.concatenate(advs), np.concatenate(targets)


def flatten_batches(
    batches: list[RolloutBatch], *, gamma: float, lam: float
) -> dict[str, np.ndarray]:
    """flatten_arrays with GAE's advantages and returns."""
    flat = flatten_arrays(batches)
    flat["advantages"], flat["returns"] = gae_targets(batches, gamma=gamma, lam=lam)
    return flat


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """1 - Var(y_true - y_pred) / Var(y_true); NaN when the targets do not vary."""
    var_y = float(np.var(y_true))
    return float("nan") if var_y == 0 else 1 - float(np.var(y_true - y_pred)) / var_y


class _Prepared(NamedTuple):
    """One update's batch: its tensors on the device, the raw observations (for the
    normalizer), and on the host, in flatten_arrays' order, the values the targets were
    computed from and the value targets, both as returns (for explained variance and the
    return statistics)."""

    data: Minibatch | SequenceMinibatch
    raw_obs: torch.Tensor
    values: np.ndarray
    returns: np.ndarray


class PPOTrainer:
    """Owns the policy and the optimizer; `update(batches)` runs one PPO update.

    Both live on `device` (the policy is moved there): each update's batch is built on the
    host (GAE in numpy) and goes to the device once; weights come back to the host once
    per publish (`host_state`) and per checkpoint (`get_state`), so nothing outside the
    trainer sees a device tensor."""

    def __init__(
        self,
        *,
        policy: Policy,
        config: PPOConfig,
        device: torch.device | str = "cpu",
        group: LearnerGroup | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        self.config = config
        self._to_device = HostToDevice(self.device)
        # Every parameter becomes a view into one buffer, so clipping and Adam are a
        # handful of ops on two flat tensors (see flat_params.py).
        self.flat = FlatParameters(policy)
        self.optimizer = FlatAdam(self.flat.data, self.flat.grad, eps=1e-5)
        self._gradient = select_gradient(config.gradients, policy, self.flat)
        # A learner group (group.py): between a minibatch's gradient and the optimizer
        # step, the whole gradient, one flat buffer, is averaged over the ranks in place
        # (one all-reduce), so that every rank takes the same step. None: a learner alone.
        self.group = group
        self.recurrent = bool(getattr(policy, "recurrent", False))
        self.updates = 0
        # The KL penalty's beta (objective kl-penalty), adapted after every update.
        self.kl_coef = config.kl_penalty_coef
        # --norm-returns: the value targets' statistics, on the device the targets go to.
        self.returns_norm = ReturnNormalizer().to(self.device) if config.norm_returns else None

    def _learning_rate(self, env_steps: int) -> float:
        cfg = self.config
        lr = cfg.learning_rate
        horizon = cfg.anneal_lr_steps or cfg.total_steps
        if cfg.anneal_lr and horizon > 0:
            lr *= max(0.0, 1.0 - env_steps / horizon)
            lr = max(lr, cfg.learning_rate * 1e-3)  # never exactly 0: a run may go past
        return lr

    def update(self, batches: list[RolloutBatch], env_steps: int) -> dict[str, float]:
        """One PPO update over `batches`; returns CleanRL-named statistics.

        In a learner group every rank calls it at once, each with its own batches (none,
        for a rank whose actors are gone) and the group's `env_steps`: the update is then
        the one a learner alone would make on every rank's batches together, and the
        statistics are the group's."""
        cfg = self.config
        t0 = time.perf_counter()
        comm0 = self.group.comm_s if self.group is not None else 0.0
        batch = self._prepare(batches) if batches else None
        samples = 0 if batch is None else len(batch.returns)
        rows = 0 if batch is None else len(batch.data.obs)
        moments = torch.zeros(3, dtype=torch.float64)
        if self.returns_norm is not None and batch is not None:
            moments = ReturnNormalizer.moments(batch.returns)
        if self.group is not None:
            # One collective for the sizes and, with --norm-returns, the targets' moments.
            sums = torch.cat([torch.tensor([samples, rows], dtype=torch.float64), moments])
            sums = self.group.sum_(sums.to(self.device)).cpu()
            samples, rows, moments = int(sums[0]), int(sums[1]), sums[2:]
        if samples == 0:
            raise ValueError("an update needs at least one sample (on some rank)")
        if self.returns_norm is not None:
            self.returns_norm.merge_moments(moments)
            if batch is not None:
                returns = self.returns_norm.normalize(batch.data.returns)
                batch = batch._replace(data=batch.data._replace(returns=returns))
        t1 = time.perf_counter()
        lr = self._learning_rate(env_steps)
        history, n_mb = self._sgd(batch, lr, samples=samples, rows=rows)
        kl_coef_used = self.kl_coef
        if cfg.objective == "kl-penalty":
            # The KL the update ended with: its last epoch's minibatches, measured before
            # each step, i.e. of the policy as the epoch went.
            last = history[-n_mb:]
            kl = float(torch.stack([st.approx_kl for st in last]).mean())
            self.kl_coef = adapt_kl_coef(self.kl_coef, kl, cfg.kl_penalty_target)
        # After the update: this version trained with the statistics its actors used;
        # the next one carries statistics that include these observations.
        explained_var = self._after_update(batch)
        t2 = time.perf_counter()
        self.updates += 1

        # The update's statistics reach the host in one copy (one sync on a GPU).
        means = (
            torch.stack([torch.stack(st) for st in history]).mean(0).tolist()
            if history
            else [float("nan")] * len(PPOLossStats._fields)  # a group step no rank had data for
        )
        out = {f"losses/{k}": v for k, v in zip(PPOLossStats._fields, means, strict=True)}
        out.update(
            {
                "losses/explained_variance": explained_var,
                "charts/learning_rate": lr,
                "charts/epochs": float(len(history) // n_mb),  # every epoch run is whole
                "charts/samples": float(samples),
                "time/learner_targets": t1 - t0,
                "time/learner_sgd": t2 - t1,
            }
        )
        if self.group is not None:
            # Inside the SGD time: the collectives, waits for the slowest rank included.
            out["time/learner_allreduce"] = self.group.comm_s - comm0
        if cfg.objective == "kl-penalty":  # a column only runs with the penalty have
            out["charts/kl_coef"] = kl_coef_used
        return out

    def _prepare(self, batches: list[RolloutBatch]) -> _Prepared:
        """The update's tensors on the device (its one trip there; no copy at all on the
        CPU) with their advantages and value targets. A recurrent policy trains on whole
        env sequences, held as rows [E, T, ...]; every other policy on samples [T*N, ...].
        Targets and statistics are computed in flatten_arrays' order either way."""
        cfg, to_device = self.config, self._to_device
        denorm = None if self.returns_norm is None else self.returns_norm.denormalize
        seq_extra: dict[str, torch.Tensor] = {}
        if self.recurrent:
            seq = sequence_arrays(batches)
            flat = {k: from_rows(seq[k], batches) for k in ("logp", "values")}
            rows, steps = seq["obs"].shape[:2]
            raw_obs = to_device(seq["obs"]).reshape(rows * steps, *seq["obs"].shape[2:])
            obs = self.policy.preprocess(raw_obs)
            obs = obs.reshape(rows, steps, *obs.shape[1:])
            actions = to_device(seq["actions"])
            seq_extra = {"starts": to_device(seq["starts"]), "state": to_device(seq["state"])}

            def layout(a: np.ndarray) -> np.ndarray:
                return to_rows(a, batches)
        else:
            flat = flatten_arrays(batches)
            raw_obs = to_device(flat["obs"])
            obs = self.policy.preprocess(raw_obs)
            actions = to_device(flat["actions"])

            def layout(a: np.ndarray) -> np.ndarray:
                return a

        if self.policy.discrete:
            actions = actions.long()
        values = flat["values"]
        if cfg.targets == "vtrace":
            # Targets for the policy as it is now, from its own log-probs and values: the
            # value loss is then clipped around (and explained variance measured on) these
            # values rather than the actor's.
            target_logp, values = self._evaluate_batch(obs, actions, **seq_extra)
            if self.recurrent:
                target_logp, values = from_rows(target_logp, batches), from_rows(values, batches)
            advantages, returns = vtrace_targets(
                batches, target_logp, values, gamma=cfg.gamma,
                rho_bar=cfg.vtrace_rho_bar, c_bar=cfg.vtrace_c_bar, denorm=denorm,
            )  # fmt: skip
        else:
            advantages, returns = gae_targets(
                batches, gamma=cfg.gamma, lam=cfg.gae_lambda, denorm=denorm
            )
        # The value loss compares the head's outputs with the targets: with --norm-returns,
        # both normalized (old_values as the head gave them; returns in update()).
        fields = {
            "obs": obs,
            "actions": actions,
            "old_logp": to_device(layout(flat["logp"])),
            "old_values": to_device(layout(values)),
            "advantages": to_device(layout(advantages)),
            "returns": to_device(layout(returns)),
        }
        if self.recurrent:
            data: Minibatch | SequenceMinibatch = SequenceMinibatch(**fields, **seq_extra)
        else:
            data = Minibatch(**fields)
            if not cfg.shuffle_minibatches:
                # Fixed minibatches are contiguous slices: in rollout order each holds a few
                # envs' whole rollouts, as Sample Factory's do (rows are already sequences).
                order = torch.from_numpy(rollout_order(batches)).to(self.device)
                data = Minibatch(*(t[order] for t in data))
        return _Prepared(data, raw_obs, _as_returns(values, denorm), returns)

    def _sgd(
        self, batch: _Prepared | None, lr: float, *, samples: int, rows: int
    ) -> tuple[list[PPOLossStats], int]:
        """The update's epochs of minibatch steps: (each step's statistics, minibatches per
        epoch). Rows are samples, or a recurrent policy's whole sequences of T samples.
        `samples` and `rows`: the update's, over the group (every rank then runs the same
        number of steps, whatever its own batch holds: `batch` None when it holds none)."""
        cfg = self.config
        # Near-equal minibatches of about --minibatch-size samples that cover every row (no
        # 1-sample remainder, whose advantage std would be undefined; a sequence has T
        # samples of its own).
        n_mb = 1 if cfg.minibatch_size == 0 else max(1, round(samples / cfg.minibatch_size))
        n_mb = min(n_mb, rows if self.recurrent else max(1, rows // 2))
        if self.group is not None:
            return self._group_sgd(batch, lr, n_mb)
        assert batch is not None
        data = batch.data
        size = len(data.obs)
        bounds = [size // n_mb + (i < size % n_mb) for i in range(n_mb)]
        coefs = self._coefs(norm_adv=cfg.norm_adv)
        history: list[PPOLossStats] = []
        for _epoch in range(cfg.update_epochs):
            # One gather per array per epoch, then contiguous slices; a single minibatch
            # needs no shuffling at all (its gradient does not depend on sample order), and
            # --no-shuffle-minibatches takes the same slices every epoch.
            shuffled = data
            if n_mb > 1 and cfg.shuffle_minibatches:
                perm = torch.randperm(size, device=self.device)
                shuffled = type(data)(*(t[perm] for t in data))
            for mb in zip(*(torch.split(t, bounds) for t in shuffled), strict=True):
                history.append(self._gradient(type(data)(*mb), **coefs))
                self.flat.clip_grad_norm_(cfg.max_grad_norm)
                self.optimizer.step(lr)
            if cfg.target_kl is not None and float(history[-1].approx_kl) > cfg.target_kl:
                break  # early stop: the policy moved too far from the behaviour policy
        return history, n_mb

    def _coefs(self, *, norm_adv: bool) -> dict[str, Any]:
        cfg = self.config
        return dict(
            clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
            clip_vloss=cfg.clip_vloss, norm_adv=norm_adv,
            objective=cfg.objective, kl_coef=self.kl_coef,
        )  # fmt: skip

    def _group_sgd(
        self, batch: _Prepared | None, lr: float, n_mb: int
    ) -> tuple[list[PPOLossStats], int]:
        """_sgd in a learner group: minibatch step j is the union of every rank's j-th
        minibatch. Its advantages are normalized with the union's statistics (one small
        all-reduce per update, for every epoch's minibatches: the shuffles are drawn
        first), its gradient is the ranks' gradients weighted by their samples (one
        all-reduce per step), and so are its loss statistics: the step a learner alone
        would take on that union, the same step on every rank."""
        cfg, group = self.config, self.group
        assert group is not None
        coefs = self._coefs(norm_adv=False)  # normalized here, with the group's statistics
        data = None if batch is None else batch.data
        size = 0 if data is None else len(data.obs)
        bounds = [size // n_mb + (i < size % n_mb) for i in range(n_mb)]
        perms = [
            torch.randperm(size, device=self.device)
            if n_mb > 1 and size and cfg.shuffle_minibatches
            else None
            for _ in range(cfg.update_epochs)
        ]
        adv_stats = self._group_advantage_stats(data, perms, bounds) if cfg.norm_adv else None
        no_stats = torch.zeros(len(PPOLossStats._fields), device=self.device)
        history: list[PPOLossStats] = []
        for epoch, perm in enumerate(perms):
            minibatches: list[Any] = [None] * n_mb
            if data is not None:
                shuffled = data if perm is None else type(data)(*(t[perm] for t in data))
                minibatches = [
                    type(data)(*mb)
                    for mb in zip(*(torch.split(t, bounds) for t in shuffled), strict=True)
                ]
            for j, mb in enumerate(minibatches):
                n = 0 if mb is None else mb.advantages.numel()
                if n:
                    if adv_stats is not None:
                        mean, std = adv_stats[epoch][j]
                        mb = mb._replace(advantages=normalize_advantages(mb.advantages, mean, std))
                    stats = torch.stack(self._gradient(mb, **coefs))
                else:
                    self.flat.grad.zero_()
                    stats = no_stats
                total, mean_stats = group.average_gradient(self.flat.grad, n, stats)
                if total < (2 if cfg.norm_adv else 1):
                    continue  # a step no rank has samples for: skipped by every rank
                history.append(PPOLossStats(*mean_stats.to(self.device).float().unbind()))
                self.flat.clip_grad_norm_(cfg.max_grad_norm)
                self.optimizer.step(lr)
            if (
                cfg.target_kl is not None
                and history
                and float(history[-1].approx_kl) > cfg.target_kl
            ):
                break  # the group's KL: every rank stops at the same epoch
        return history, n_mb

    def _group_advantage_stats(
        self, data: Any, perms: list[torch.Tensor | None], bounds: list[int]
    ) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """[epoch][step]: (mean, unbiased std) of that minibatch step's advantages over the
        group, for every epoch's shuffle at once (one all-reduce)."""
        assert self.group is not None
        sums = torch.zeros(len(perms), len(bounds), 3, dtype=torch.float64, device=self.device)
        if data is not None:
            adv = data.advantages.to(torch.float64)
            for e, perm in enumerate(perms):
                shuffled = adv if perm is None else adv[perm]
                for j, part in enumerate(torch.split(shuffled, bounds)):
                    sums[e, j, 0] = part.numel()
                    sums[e, j, 1] = part.sum()
                    sums[e, j, 2] = part.square().sum()
        n, s, ss = self.group.sum_(sums).unbind(2)
        mean = s / n.clamp(min=1)
        var = (ss - n * mean.square()) / (n - 1).clamp(min=1)
        std = var.clamp(min=0).sqrt()
        mean, std = mean.float(), std.float()
        return [
            list(zip(mean[e].unbind(), std[e].unbind(), strict=True)) for e in range(len(perms))
        ]

    def _after_update(self, batch: _Prepared | None) -> float:
        """Observation statistics merged with this update's observations; returns the
        explained variance of the value targets. In a group, both over every rank's batch
        (one all-reduce of their moments)."""
        norm = self.policy.obs_norm
        if self.group is None:
            assert batch is not None
            if norm is not None:
                norm.update(batch.raw_obs.flatten(1))
            return explained_variance(batch.values, batch.returns)
        dim = 0 if norm is None else norm.mean.numel()
        sums = torch.zeros(5 + 2 * dim, dtype=torch.float64)
        if batch is not None:
            y = batch.returns.astype(np.float64)
            err = y - batch.values.astype(np.float64)
            sums[:5] = torch.tensor(
                [len(y), y.sum(), np.square(y).sum(), err.sum(), np.square(err).sum()]
            )
            if norm is not None:
                x = batch.raw_obs.flatten(1).to(torch.float64).cpu()
                sums[5 : 5 + dim], sums[5 + dim :] = x.sum(0), x.square().sum(0)
        sums = self.group.sum_(sums.to(self.device)).cpu()
        n = float(sums[0])
        if norm is not None:
            mean = sums[5 : 5 + dim] / n
            norm.merge(n, mean, (sums[5 + dim :] / n - mean.square()).clamp(min=0))
        var_y = float(sums[2]) / n - (float(sums[1]) / n) ** 2
        var_err = float(sums[4]) / n - (float(sums[3]) / n) ** 2
        return float("nan") if var_y <= 0 else 1 - var_err / var_y

    @torch.no_grad()
    def _evaluate_batch(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        starts: torch.Tensor | None = None,
        state: torch.Tensor | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(log-probs, values) of the whole batch under the current policy, on the host,
        in the layout of `obs` (samples, or rows of a recurrent policy's sequences)."""
        policy = self.policy
        logps, values = [], []
        if starts is None or state is None:
            for o, a in zip(
                torch.split(obs, _EVAL_CHUNK), torch.split(actions, _EVAL_CHUNK), strict=True
            ):
                logp, _, value = policy.evaluate(o, a)
                logps.append(logp)
                values.append(value)
        else:
            rows = max(1, _EVAL_CHUNK // obs.shape[1])  # whole sequences per forward pass
            for o, a, st, s0 in zip(
                *(torch.split(t, rows) for t in (obs, actions, starts, state)), strict=True
            ):
                logp, _, value = policy.evaluate_sequence(
                    o.transpose(0, 1), a.transpose(0, 1), st.transpose(0, 1),
                    policy.state_from_wire(s0),
                )  # fmt: skip
                logps.append(logp.T)
                values.append(value.T)
        return (
            torch.cat(logps).float().cpu().numpy(),
            torch.cat(values).float().cpu().numpy(),
        )

    def _host_tensors(self) -> dict[str, torch.Tensor]:
        """The policy's state_dict on the host. On the CPU, the live tensors themselves; on
        a device, the flat parameter buffer comes back in one copy, cut into views by
        name, and each buffer (obs_norm's statistics) in its own."""
        state = self.policy.state_dict()
        if self.device.type == "cpu":
            return state
        params = self.flat.unflatten(self.flat.data.to("cpu"))
        return {k: params[k] if k in params else v.to("cpu") for k, v in state.items()}

    def host_policy(self) -> Policy:
        """The policy on the host: itself on the CPU, else a CPU copy of its weights (for
        the final weights file and the greedy evaluation, which steps envs on the host)."""
        if self.device.type == "cpu":
            return self.policy
        policy = build_model(self.policy.spec)
        policy.load_state_dict(self._host_tensors())
        return policy

    def host_state(self) -> dict[str, np.ndarray]:
        """Parameters and buffers as numpy arrays for the wire (what numpy_state gives,
        without a copy per tensor from a device): once per publish."""
        return {k: v.numpy() for k, v in self._host_tensors().items()}

    def get_state(self) -> dict[str, Any]:
        """For a checkpoint: host tensors only, so that it loads anywhere (a checkpoint of
        a GPU learner resumes on a CPU one, and the other way round)."""
        state = {
            "policy": self._host_tensors(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
            "kl_coef": self.kl_coef,
        }
        if self.returns_norm is not None:
            state["returns_norm"] = {k: v.cpu() for k, v in self.returns_norm.state_dict().items()}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        saved = state.get("returns_norm")
        if (saved is None) != (self.returns_norm is None):
            # The value head's outputs mean returns on one scale or the other: a switch
            # would train it on targets it was never fitted to.
            made = "without" if saved is None else "with"
            raise UsageError(
                f"this checkpoint was trained {made} --norm-returns: resume it with the "
                f"same setting, or start a new run (another --run-dir)"
            )
        if self.returns_norm is not None:
            self.returns_norm.load_state_dict(saved)
        self.policy.load_state_dict(state["policy"])  # copies into the flat buffer in place
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        # Checkpoints from before the KL penalty: its starting value.
        self.kl_coef = float(state.get("kl_coef", self.config.kl_penalty_coef))
