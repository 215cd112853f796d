"""The settings groups (pydantic-settings models); each service takes the groups it needs."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ppomq.core.settings._base import SettingsGroup
from ppomq.core.settings.presets import AUTO, NO_PRESET, preset_names, unknown_preset
from ppomq.core.settings.secrets import SecretUrl

PRESET_HELP = (
    "Start from a named set of published hyper-parameters, ppomq/presets/NAME.toml "
    f"({', '.join(preset_names())}; `ppomq presets` lists them). A config file, PPOMQ_* "
    f"variables and flags override its values. {AUTO}: picked from the env's spaces (uint8 "
    "image observations: atari; continuous actions on vector observations: mujoco; else "
    f"none), the default of `ppomq train`, which names its pick in its first line. "
    f"{NO_PRESET} (or empty, the default of `ppomq learner` and `ppomq actor`): the built-in "
    "defaults, which are the cartpole preset's."
)


class PresetSettings(SettingsGroup):
    """Which preset a learner, actor or `ppomq train` starts from (applied by load_settings)."""

    preset: str = Field("", description=PRESET_HELP)

    @field_validator("preset")
    @classmethod
    def _known(cls, value: str) -> str:
        if value and value not in (AUTO, NO_PRESET, *preset_names()):
            raise ValueError(unknown_preset(value))
        return value


# --- settings groups ---------------------------------------------------------------------


class CommonSettings(SettingsGroup):
    """What every ppomq process needs."""

    run_id: str = Field(
        "default", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Run name; Redis key prefix."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log verbosity."
    )
    log_json: bool = Field(False, description="Log one JSON object per line.")
    events_file: str = Field(
        "",
        description="Append this process's events (JSON lines, docs/concepts/events.md) to this "
        "file; empty: none. `ppomq train` writes RUN_DIR/events.jsonl when empty, and points its "
        "children at the file it writes.",
    )
    metrics_port: int = Field(
        0, ge=0, le=65535, description="Prometheus /metrics port; 0 turns it off."
    )


class RedisSettings(SettingsGroup):
    redis_url: SecretUrl = Field(
        SecretUrl("redis://127.0.0.1:6379/0"),
        description="Redis URL (redis://[user:password@]host:port/db).",
    )


class EnvSettings(SettingsGroup):
    env_id: str = Field("CartPole-v1", description="Gymnasium environment id.")
    num_envs: int = Field(8, ge=1, le=4096, description="Environments per actor (N).")
    num_steps: int = Field(32, ge=1, le=100_000, description="Steps per rollout (T).")
    seed: int = Field(1, ge=0, description="Run seed; env and torch seeds derive from it.")


class TransportSettings(SettingsGroup):
    rollout_hwm: int = Field(
        4, ge=1, description="Rollout batches queued per socket before senders block."
    )
    heartbeat_ivl_ms: int = Field(1000, ge=0, description="ZeroMQ heartbeat interval; 0 off.")
    heartbeat_timeout_ms: int = Field(5000, ge=0, description="A peer silent this long is dropped.")
    max_message_bytes: int = Field(
        256 << 20, ge=1 << 16, description="Largest rollout message accepted (bytes)."
    )


class CurveServerSettings(SettingsGroup):
    """CURVE on a binding socket (learner, weightserver); required beyond loopback,
    docs/guides/security.md."""

    curve_server_cert: str = Field(
        "",
        description="The server's secret certificate (ZeroMQ format, NAME.key_secret; "
        "`ppomq keys generate` writes DIR/server.key_secret). Set together with "
        "curve_allowed_dir; both empty: no CURVE, which only a loopback bind (or "
        "insecure_plaintext) allows.",
    )
    curve_allowed_dir: str = Field(
        "",
        description="Directory of the public certificates (*.key) of the actors allowed in "
        "(DIR/allowed); every other key is refused. Read at start.",
    )
    insecure_plaintext: bool = Field(
        False,
        description="Serve plain, unauthenticated ZeroMQ on a bind beyond loopback: anyone "
        "who reaches the port may send rollouts and read weights. Off: such a bind needs "
        "CURVE. Loopback binds never need CURVE.",
    )


class CurveClientSettings(SettingsGroup):
    """CURVE on a connecting socket (actor), docs/guides/security.md."""

    curve_actor_cert: str = Field(
        "",
        description="This actor's secret certificate (DIR/actors/actor-I.key_secret); set "
        "together with curve_server_public_cert; both empty: no CURVE.",
    )
    curve_server_public_cert: str = Field(
        "",
        description="The server's public certificate (DIR/server.key), shared by the learner "
        "and the weightservers.",
    )


class WeightStoreSettings(SettingsGroup):
    keep_versions: int = Field(
        20, ge=1, description="Weight versions kept in Redis (plus protected ones)."
    )


class WeightserverSettings(CommonSettings, RedisSettings, CurveServerSettings):
    """`ppomq weightserver`."""

    bind: str = Field("tcp://*:5556", description="Where the weightserver answers actors.")
    poll_interval_s: float = Field(
        1.0, gt=0, description="Fallback poll of Redis when no announcement arrives."
    )


class PPOSettings(SettingsGroup):
    """PPO hyperparameters; defaults are rl-baselines3-zoo's CartPole-v1 settings."""

    mode: Literal["async", "sync"] = Field(
        "async",
        description="async: IMPALA-style, batches up to --max-staleness versions old; "
        "sync: one fresh batch from each actor per version (exact synchronous PPO).",
    )
    max_staleness: int = Field(
        2, ge=0, description="Oldest accepted batch, in versions behind the learner (async)."
    )
    batch_samples: int = Field(
        0,
        ge=0,
        description="The update-size rule. 0: a batch from every live actor (with "
        "--batches-per-version 2 or more, an actor samples its next batches while the "
        "learner trains, and they go into the next updates), so the update grows with the "
        "actors and every batch an actor samples is trained on, however many replicas run. "
        "N > 0 (async): N samples per update (whole batches until at least this many) "
        "whatever number of actors is live; the "
        "learner grants per version only the batches its next updates take, and actors "
        "without a grant wait. Sync mode takes one batch from each live actor.",
    )
    batches_per_version: int = Field(
        1,
        ge=0,
        description="Under --batch-samples 0, the batches an actor may send with one policy "
        "version before it waits for a newer one: 1 samples in lock-step with the learner, "
        "2 samples the next batch while the learner trains. 0 (only with "
        "--batch-samples N): actors never wait and the learner drops what it cannot take. "
        "Set on the learner; actors follow it through the weights header. Sync mode uses 1.",
    )
    actor_timeout_s: float = Field(
        3.0,
        gt=0,
        description="An actor silent this long is left out of the update it would hold up "
        "(async: the batch target; sync: the quorum) until it sends again.",
    )
    gamma: float = Field(0.98, gt=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.8, ge=0, le=1, description="GAE lambda.")
    targets: Literal["gae", "vtrace"] = Field(
        "gae",
        description="Advantages and value targets: gae (on the actor's values; exact for "
        "fresh batches) or vtrace (IMPALA's off-policy correction, computed for the "
        "learner's current policy: batches several versions old stay useful).",
    )
    vtrace_rho_bar: float = Field(
        1.0, gt=0, description="V-trace: truncation of the importance weights in the targets."
    )
    vtrace_c_bar: float = Field(
        1.0, gt=0, description="V-trace: truncation of the trace-cutting weights."
    )
    learning_rate: float = Field(1e-3, gt=0, description="Adam learning rate.")
    anneal_lr: bool = Field(
        True,
        description="Anneal the learning rate linearly to 0 at --anneal-lr-steps (off when "
        "that and --total-steps are 0: the learner says so in one warning line).",
    )
    anneal_lr_steps: int = Field(
        0,
        ge=0,
        description="Env steps at which the annealed learning rate reaches 0; 0: "
        "--total-steps. A horizon past the run's end decays it only part of the way, as "
        "Sample Factory's linear_decay does on Atari (its horizon counts frames: 4x the "
        "agent steps).",
    )
    update_epochs: int = Field(20, ge=1, description="Passes over each batch per update.")
    minibatch_size: int = Field(
        256,
        ge=0,
        description="Samples per SGD step; each epoch splits the update's batch into "
        "near-equal minibatches of about this size. 0: the whole batch in one step.",
    )
    shuffle_minibatches: bool = Field(
        True,
        description="Draw each epoch's minibatches at random. Off: every epoch takes the same "
        "contiguous slices, each a few envs' whole rollouts (a recurrent policy's: a few "
        "whole sequences), as Sample Factory's shuffle_minibatches False does.",
    )
    clip_coef: float = Field(0.2, gt=0, description="PPO surrogate clip range.")
    clip_vloss: bool = Field(False, description="Clip the value loss as the policy is clipped.")
    norm_adv: bool = Field(True, description="Normalize advantages per minibatch.")
    norm_returns: bool = Field(
        False,
        description="Train the value head on returns normalized by their running mean and "
        "std, as Sample Factory's normalize_returns does: the learner denormalizes the "
        "actors' values for the targets, and keeps the statistics in its checkpoint (a run "
        "resumes only with the setting it started with).",
    )
    ent_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")
    vf_coef: float = Field(0.5, ge=0, description="Value loss coefficient.")
    max_grad_norm: float = Field(0.5, gt=0, description="Global gradient-norm clip.")
    target_kl: float | None = Field(
        None, gt=0, description="Stop an update's epochs early above this approx-KL."
    )
    objective: Literal["clip", "kl-penalty"] = Field(
        "clip",
        description="The policy term: clip (the clipped surrogate, PPO paper section 3) or "
        "kl-penalty (the surrogate minus an adaptive KL penalty, section 4).",
    )
    kl_penalty_target: float = Field(
        0.01,
        gt=0,
        description="kl-penalty: the KL per update the coefficient aims at (halved below "
        "target/1.5, doubled above target*1.5).",
    )
    kl_penalty_coef: float = Field(
        1.0, ge=0, description="kl-penalty: the coefficient's starting value (beta)."
    )
    gradients: Literal["auto", "analytic", "autograd"] = Field(
        "auto",
        description="How the learner differentiates the PPO loss: autograd (torch autograd "
        "on the one PPO objective, the reference; any model), analytic (hand-derived "
        "backward of the MLP actor-critic, faster; refused for a model it was not derived "
        "for) or auto (analytic when the model supports it, autograd otherwise).",
    )
    arch: Literal["auto", "mlp", "nature-cnn", "lstm"] = Field(
        "auto",
        description="The policy network: auto (nature-cnn for uint8 image observations, "
        "else mlp), mlp, nature-cnn, or lstm (the observation's encoder, then an LSTM of "
        "--lstm-size, for tasks that need memory; trained on whole env sequences).",
    )
    lstm_size: int = Field(128, ge=1, description="lstm: the LSTM's hidden and cell size.")
    hidden_sizes: str = Field("64,64", description="Hidden layer sizes, comma-separated.")
    activation: Literal["tanh", "relu"] = Field(
        "tanh", description="Activation after each hidden layer of the MLP."
    )
    init: Literal["cleanrl", "unit"] = Field(
        "cleanrl",
        description="How a new run's weights start: cleanrl (orthogonal, gain sqrt 2 on "
        "hidden layers, 0.01 on the policy head, 1 on the value head, as CleanRL and SB3) "
        "or unit (orthogonal with gain 1 on every layer, as Sample Factory's "
        "policy_init_gain 1.0).",
    )
    norm_obs: bool = Field(
        False,
        description="Normalize observations by their running mean and variance, as "
        "CleanRL's ppo_continuous_action does (pixels: each pixel by its own, in place of "
        "the 1/255 scaling, as Sample Factory's normalize_input); the statistics travel "
        "with the weights, so actors, exported weights and `ppomq eval` normalize exactly "
        "like the learner.",
    )
    norm_reward: bool = Field(
        False,
        description="Scale rewards per env in the actor by the running std of the "
        "discounted return (--gamma), as CleanRL's ppo_continuous_action does with "
        "gymnasium's NormalizeReward. Set on the learner; actors follow it through the "
        "weights header.",
    )

    @field_validator("hidden_sizes")
    @classmethod
    def _sizes(cls, value: str) -> str:
        parts = [h.strip() for h in value.split(",") if h.strip()]
        if not all(h.isdigit() and int(h) >= 1 for h in parts):
            raise ValueError(
                f"{value!r} is not comma-separated layer sizes >= 1 (e.g. 64,64; empty: none)"
            )
        return value

    @property
    def hidden(self) -> list[int]:
        return [int(h) for h in self.hidden_sizes.split(",") if h.strip()]


class RunSettings(SettingsGroup):
    """Where a run lives and when it stops."""

    run_dir: str = Field(
        "",
        description="Run directory (events, checkpoints, summary); empty: runs/RUN_ID for a "
        "learner (so a restart resumes), runs/RUN_ID-TIMESTAMP for `ppomq train`.",
    )
    actors: int = Field(
        2,
        ge=1,
        le=1024,
        description="Actor processes (train). For the learner a hint only: how many actors "
        "to wait for before it has heard from any; after that it counts the live ones.",
    )
    total_steps: int = Field(
        100_000, ge=0, description="Stop after this many env steps; 0 means no limit."
    )
    duration_s: float = Field(0.0, ge=0, description="Stop after this many seconds; 0: no limit.")
    target_return: float | None = Field(
        None, description="Stop once the mean of the last 20 episodes reaches this."
    )
    checkpoint_interval_s: float = Field(
        1.0,
        ge=0,
        description="Checkpoint after an update once this many seconds have passed since "
        "the last one (bounds what a learner restart loses); 0: after every update.",
    )
    eval_episodes: int = Field(
        20, ge=0, description="Greedy evaluation episodes when the run ends; 0 skips it."
    )
    eval_timeout_s: float = Field(
        60.0,
        ge=0,
        description="The final evaluation's time bound: episodes not finished by then are "
        "left out of its mean (summary.json says how many finished); 0: no bound.",
    )
    learning_curve: bool = Field(
        True,
        description="Draw RUN_DIR/learning_curve.png (matplotlib) when the run ends "
        "(`ppomq train` draws it itself, having loaded matplotlib while the run trained).",
    )
    resume: bool = Field(
        False,
        description="Go on with a run that has finished (its checkpoint, counters and "
        "weights; e.g. with a higher --total-steps). Off: a learner started on a finished "
        "run starts a new one under the same run id (the old run dir moved to RUN_DIR.N). "
        "A run that has not finished (a crash, a stop signal) always resumes.",
    )
    recover: bool = Field(
        False,
        description="Go on with a run whose checkpoint is damaged or missing: from the "
        "newest verified weights in Redis, with the counters taken from the checkpoint kept "
        "before it if that one verifies, else rebuilt from the run dir's episodes.csv and "
        "progress.csv. Off: such a run stops with one line saying what is wrong.",
    )


class LearnerGroupSettings(SettingsGroup):
    """A learner group (DD-PPO): ranks, their rendezvous and stragglers. A learner joins a
    group when torchrun's environment says so (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT);
    these settings shape how it takes part."""

    group_backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto",
        description="The group's collectives: auto (NCCL on a CUDA learner, else gloo), "
        "gloo or nccl.",
    )
    group_timeout_s: float = Field(
        20.0,
        gt=0,
        description="How long a rank waits for the others in a collective, and how long a "
        "rank may send no heartbeat; past it the group is lost, every rank exits 6 and the "
        "group restarts together from the last checkpoint.",
    )
    rollout_advertise: str = Field(
        "",
        description="The endpoint this rank's actors connect to (published to them with "
        "the weights); empty: --rollout-bind, with a wildcard host replaced by this host's "
        "name. A rank binds --rollout-bind's port plus LOCAL_RANK.",
    )
    sync_frac: float = Field(
        1.0,
        gt=0,
        le=1,
        description="DD-PPO's straggler rule: once this fraction of the ranks holds its "
        "batch, a rank holding at least --min-share of its own stops collecting; 1 waits "
        "for every rank.",
    )
    min_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="The share of its batch a rank must hold before the straggler rule "
        "(--sync-frac) may cut its collection short.",
    )


class LearnerSettings(
    PresetSettings,
    CommonSettings,
    RedisSettings,
    EnvSettings,
    TransportSettings,
    WeightStoreSettings,
    PPOSettings,
    RunSettings,
    CurveServerSettings,
    LearnerGroupSettings,
):
    """`ppomq learner`."""

    rollout_bind: str = Field("tcp://*:5555", description="Where the learner receives rollouts.")
    queue_batches: int = Field(
        4, ge=1, description="Decoded batches buffered between receiving and training."
    )
    # Per-actor state is bounded: forged or churning actor ids cannot grow it.
    forget_actor_after_s: float = Field(
        600.0,
        gt=0,
        description="Forget an actor not heard from for this long (at least --actor-timeout-s): "
        "its row in the rollout ledger, `ppomq status` and Redis's actors hash, and its seq; "
        "the ledger's totals keep counting it (actors_forgotten).",
    )
    max_actors: int = Field(
        1024,
        ge=1,
        description="Actors the learner keeps per-actor state for; beyond it the least "
        "recently heard one is dropped (counted as actors_dropped_over_cap, totals kept).",
    )
    device: str = Field(
        "auto",
        description="Where the learner trains: auto (CUDA when torch sees a GPU, else the "
        "CPU), cpu, cuda or cuda:N. cuda where there is none is an error at start. The "
        "start log line names the device.",
    )
    torch_threads: int = Field(
        1,
        ge=0,
        description="CPU threads of the learner's torch (intra-op). 1: what it always "
        "used, right where actors share the machine (`ppomq train`, compose); a learner "
        "with cores of its own (a pod's CPU request) sets their number; 0: every CPU the "
        "process may run on (its affinity mask), within its container's CPU quota (the "
        "atari preset's choice).",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", value):
            raise ValueError(f"{value!r} is not a device; use auto, cpu, cuda or cuda:N")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> LearnerSettings:
        if self.mode == "sync" and self.max_staleness != 0:
            object.__setattr__(self, "max_staleness", 0)
        if self.mode == "async" and not self.batch_samples and not self.batches_per_version:
            raise ValueError(
                "batches_per_version 0 (actors never wait) needs a fixed update size: set "
                "--batch-samples N, or a share of at least 1 per actor"
            )
        if self.forget_actor_after_s < self.actor_timeout_s:
            raise ValueError(
                f"forget_actor_after_s {self.forget_actor_after_s:g} is below actor_timeout_s "
                f"{self.actor_timeout_s:g}: a live actor would be forgotten; raise it"
            )
        if self.max_staleness >= self.keep_versions:
            raise ValueError(
                f"max_staleness {self.max_staleness} needs at least {self.max_staleness + 1} "
                f"kept versions; raise --keep-versions or lower --max-staleness"
            )
        return self


class ActorLoopSettings(SettingsGroup):
    """How an actor steps its envs and talks to the weightserver."""

    vectorization: Literal["sync", "async", "vector_entry_point"] = Field(
        "sync",
        description="Step envs in this process (sync), in subprocesses (async), or by the "
        "vector env the id registers as its vector_entry_point (such as N envs in one C "
        "call; it must autoreset in the same step); gymnasium backend only.",
    )
    env_backend: Literal["gymnasium", "envpool", "ale"] = Field(
        "gymnasium",
        description="What steps the actor's envs: gymnasium (any id), envpool (Atari and "
        "MuJoCo ids, in EnvPool's C++ threads; needs the envpool extra) or ale (Atari "
        "ids, in ale-py's C++ AtariVectorEnv threads, no OpenCV). Same observations, rewards "
        "and episode reports; the differences are in the presets and models guide. "
        "Evaluation always uses gymnasium.",
    )
    weights_timeout_ms: int = Field(2000, ge=1, description="Weightserver request timeout.")
    resend_after_s: float = Field(
        5.0,
        gt=0,
        description="An actor that has waited this long for a newer version (or twice "
        "the longest of the last intervals between versions, when that is longer: a slow "
        "learner is not a stuck one) sends another batch with the one it holds: a learner "
        "that lost its batches (a restart, a network cut) would otherwise wait for them "
        "forever.",
    )


class ActorSettings(
    PresetSettings,
    CommonSettings,
    EnvSettings,
    TransportSettings,
    ActorLoopSettings,
    CurveClientSettings,
):
    """`ppomq actor`."""

    mode: Literal["async", "sync"] = Field(
        "async", description="sync: wait for a new version after every batch."
    )
    actor_index: int | None = Field(
        None,
        ge=0,
        description="This actor's index (env seeds derive from it); unset: derived from the "
        "hostname, so container replicas differ.",
    )
    learner_addr: str = Field("tcp://127.0.0.1:5555", description="The learner's rollout endpoint.")
    weightserver_addr: str = Field("tcp://127.0.0.1:5556", description="A weightserver endpoint.")


class TrainSettings(LearnerSettings, ActorLoopSettings):
    """`ppomq train`: every learner and actor setting, plus how to run them locally."""

    # auto here alone: `ppomq train` sets every child's settings itself, while a learner
    # and actors deployed apart (compose, Kubernetes) keep what they are given.
    preset: str = Field(AUTO, description=PRESET_HELP)

    redis_url: SecretUrl | None = Field(  # type: ignore[assignment]
        None, description="Use this Redis instead of starting an embedded redis-server."
    )
    # Empty by default: a local run must not take a fixed, all-interfaces port (two runs
    # would collide); a value the user gives is used as given.
    rollout_bind: str = Field(
        "",
        description="Where the learner receives rollouts (`ppomq learner` default "
        "tcp://*:5555; `ppomq train`: empty, a free port on 127.0.0.1).",
    )
    weightserver_bind: str = Field(
        "", description="Where the weightserver listens (train); empty: a free port on 127.0.0.1."
    )
    resume: bool = Field(
        True,
        description="Go on with a run that has finished (e.g. with a higher --total-steps). "
        "`ppomq learner` defaults to false: started on a finished run it starts a new one "
        "under the same run id (the old run dir moved to RUN_DIR.N). `ppomq train` defaults "
        "to true (each run gets a new run dir unless --run-dir is given); --no-resume refuses "
        "a finished --run-dir. A run that has not finished always resumes.",
    )
    # On by default, loopback too: on plain ZeroMQ any local process can send rollouts
    # under an actor's id (and lock it out with a huge seq) or read the weights. Its cost
    # is measured in docs/guides/security.md.
    curve: bool = Field(
        True,
        description="CURVE on the run's sockets, with keys made for it in RUN_DIR/keys "
        "(`ppomq keys generate`'s layout, kept for a resumed run; write them there first "
        "with more --actors to let actors from other hosts in). --no-curve: plain ZeroMQ, "
        "unauthenticated (any local process may send rollouts and read weights), which "
        "only loopback binds (or insecure_plaintext) allow.",
    )
    learners: int = Field(
        1,
        ge=1,
        le=64,
        description="Learner processes: a group of this many ranks (DD-PPO) that average "
        "their gradients at every minibatch step, each fed by its share of the actors.",
    )
    restart_actors: bool = Field(True, description="Restart an actor that crashes.")
    progress: bool = Field(True, description="Show live progress on the terminal.")
