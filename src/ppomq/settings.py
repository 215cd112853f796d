"""The one settings model, in layers: defaults < preset < config file (TOML) < `PPOMQ_*`
variables < flags.

A field's name is its name everywhere: `--max-staleness` on the command line,
`PPOMQ_MAX_STALENESS` in the environment (compose, k8s), `max_staleness` in a config file
or a preset. Each service takes the groups it needs; a field is defined once, in its group.
A preset (`--preset mujoco`) is a TOML file of published hyper-parameters shipped in
ppomq/presets/, each value citing its source; anything set another way overrides it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, CliSettingsSource, SettingsConfigDict

from .errors import UsageError

ENV_PREFIX = "PPOMQ_"
S = TypeVar("S", bound=BaseSettings)

# A setting that holds a secret (a password, a key, a URL that may carry user:password@)
# is marked `json_schema_extra=SECRET`: every settings file a run writes, and every error
# message, shows it redacted (`redact_settings`). A name that reads like a secret is
# treated the same even unmarked, and a URL's password is hidden in any other setting.
# Values stay plain `str`: children still get them whole, as PPOMQ_* variables
# (`settings_env`), which no `ps` command line shows.
SECRET: dict[str, Any] = {"secret": True}
_SECRET_NAME = re.compile(r"password|passwd|secret|token|credential|(^|_)(api_)?key$", re.I)


class _Group(BaseSettings):
    """Base of every settings group, so that all of them read `PPOMQ_*` the same way."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, frozen=True
    )


# --- presets -----------------------------------------------------------------------------


def _presets_dir() -> Traversable:
    return resources.files("ppomq") / "presets"


def preset_names() -> list[str]:
    """The presets shipped with ppomq: one `NAME.toml` each in ppomq/presets/."""
    return sorted(
        p.name.removesuffix(".toml") for p in _presets_dir().iterdir() if p.name.endswith(".toml")
    )


def _unknown_preset(name: str) -> str:
    return f"unknown preset {name!r}; the presets are: {', '.join(preset_names())}"


def preset_text(name: str) -> str:
    """The TOML source of preset `name`, comments (the citations) included."""
    if name not in preset_names():  # also keeps a name from reaching outside presets/
        raise UsageError(f"{_unknown_preset(name)} (--preset / {ENV_PREFIX}PRESET)")
    return (_presets_dir() / f"{name}.toml").read_text(encoding="utf-8")


def read_preset(name: str) -> dict[str, Any]:
    """Preset `name`'s settings by field name; an unknown name is a one-line UsageError."""
    return tomllib.loads(preset_text(name))


def preset_summary(name: str) -> str:
    """The first comment line of a preset file: what it is and where it comes from."""
    for line in preset_text(name).splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


class PresetSettings(_Group):
    """Which preset a learner, actor or `ppomq train` starts from (applied by load_settings)."""

    preset: str = Field(
        "",
        description="Start from a named set of published hyper-parameters, "
        f"ppomq/presets/NAME.toml ({', '.join(preset_names())}; `ppomq presets` lists them). "
        "A config file, PPOMQ_* variables and flags override its values. Empty: the "
        "built-in defaults, which are the cartpole preset's.",
    )

    @field_validator("preset")
    @classmethod
    def _known(cls, value: str) -> str:
        if value and value not in preset_names():
            raise ValueError(_unknown_preset(value))
        return value


# --- settings groups ---------------------------------------------------------------------


class CommonSettings(_Group):
    """What every ppomq process needs."""

    run_id: str = Field(
        "default", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Run name; Redis key prefix."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log verbosity."
    )
    log_json: bool = Field(False, description="Log one JSON object per line.")
    metrics_port: int = Field(
        0, ge=0, le=65535, description="Prometheus /metrics port; 0 turns it off."
    )


class RedisSettings(_Group):
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis URL (redis://[user:password@]host:port/db).",
        json_schema_extra=SECRET,
    )


class EnvSettings(_Group):
    env_id: str = Field("CartPole-v1", description="Gymnasium environment id.")
    num_envs: int = Field(8, ge=1, le=4096, description="Environments per actor (N).")
    num_steps: int = Field(32, ge=1, le=100_000, description="Steps per rollout (T).")
    seed: int = Field(1, ge=0, description="Run seed; env and torch seeds derive from it.")


class TransportSettings(_Group):
    rollout_hwm: int = Field(
        4, ge=1, description="Rollout batches queued per socket before senders block."
    )
    heartbeat_ivl_ms: int = Field(1000, ge=0, description="ZeroMQ heartbeat interval; 0 off.")
    heartbeat_timeout_ms: int = Field(5000, ge=0, description="A peer silent this long is dropped.")
    max_message_bytes: int = Field(
        256 << 20, ge=1 << 16, description="Largest rollout message accepted (bytes)."
    )


class CurveServerSettings(_Group):
    """CURVE on a binding socket (learner, weightserver); opt-in, README "Authentication"."""

    curve_server_cert: str = Field(
        "",
        description="The server's secret certificate (ZeroMQ format, NAME.key_secret; "
        "`ppomq keys generate` writes DIR/server.key_secret). Set together with "
        "curve_allowed_dir; both empty: no CURVE (plain ZeroMQ, the default for now).",
    )
    curve_allowed_dir: str = Field(
        "",
        description="Directory of the public certificates (*.key) of the actors allowed in "
        "(DIR/allowed); every other key is refused. Read at start.",
    )


class CurveClientSettings(_Group):
    """CURVE on a connecting socket (actor); opt-in, README "Authentication"."""

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


class WeightStoreSettings(_Group):
    keep_versions: int = Field(
        20, ge=1, description="Weight versions kept in Redis (plus protected ones)."
    )


class WeightserverSettings(CommonSettings, RedisSettings, CurveServerSettings):
    """`ppomq weightserver`."""

    bind: str = Field("tcp://*:5556", description="Where the weightserver answers actors.")
    poll_interval_s: float = Field(
        1.0, gt=0, description="Fallback poll of Redis when no announcement arrives."
    )


class PPOSettings(_Group):
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
        description="Samples (steps x envs) per PPO update in async mode; 0: one batch per "
        "actor (actors x num_steps x num_envs), what actors send per version.",
    )
    actor_timeout_s: float = Field(
        3.0,
        gt=0,
        description="An actor silent this long is left out of the update it would hold up "
        "(async: the batch target; sync: the quorum) until it sends again.",
    )
    gamma: float = Field(0.98, gt=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.8, ge=0, le=1, description="GAE lambda.")
    learning_rate: float = Field(1e-3, gt=0, description="Adam learning rate.")
    anneal_lr: bool = Field(
        True,
        description="Anneal the learning rate to 0 at --total-steps (off when it is 0: the "
        "learner says so in one warning line).",
    )
    update_epochs: int = Field(20, ge=1, description="Passes over each batch per update.")
    minibatch_size: int = Field(
        256,
        ge=0,
        description="Samples per SGD step; each epoch splits the update's batch into "
        "near-equal minibatches of about this size. 0: the whole batch in one step.",
    )
    clip_coef: float = Field(0.2, gt=0, description="PPO surrogate clip range.")
    clip_vloss: bool = Field(False, description="Clip the value loss as the policy is clipped.")
    norm_adv: bool = Field(True, description="Normalize advantages per minibatch.")
    ent_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")
    vf_coef: float = Field(0.5, ge=0, description="Value loss coefficient.")
    max_grad_norm: float = Field(0.5, gt=0, description="Global gradient-norm clip.")
    target_kl: float | None = Field(
        None, gt=0, description="Stop an update's epochs early above this approx-KL."
    )
    gradients: Literal["auto", "analytic", "autograd"] = Field(
        "auto",
        description="How the learner differentiates the PPO loss: autograd (torch autograd "
        "on the one PPO objective, the reference; any model), analytic (hand-derived "
        "backward of the MLP actor-critic, faster; refused for a model it was not derived "
        "for) or auto (analytic when the model supports it, autograd otherwise).",
    )
    hidden_sizes: str = Field("64,64", description="Hidden layer sizes, comma-separated.")
    activation: Literal["tanh", "relu"] = Field(
        "tanh", description="Activation after each hidden layer of the MLP."
    )
    norm_obs: bool = Field(
        False,
        description="Normalize observations by their running mean and variance, as "
        "CleanRL's ppo_continuous_action does; the statistics travel with the weights, so "
        "actors, exported weights and `ppomq eval` normalize exactly like the learner.",
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


class RunSettings(_Group):
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
    resume: bool = Field(
        False,
        description="Go on with a run that has finished (its checkpoint, counters and "
        "weights; e.g. with a higher --total-steps). Off: a learner started on a finished "
        "run starts a new one under the same run id (the old run dir moved to RUN_DIR.N). "
        "A run that has not finished (a crash, a stop signal) always resumes.",
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
):
    """`ppomq learner`."""

    rollout_bind: str = Field("tcp://*:5555", description="Where the learner receives rollouts.")
    queue_batches: int = Field(
        4, ge=1, description="Decoded batches buffered between receiving and training."
    )
    # Per-actor state is bounded (issue 17): forged or churning actor ids cannot grow it.
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

    @model_validator(mode="after")
    def _consistent(self) -> LearnerSettings:
        if self.mode == "sync" and self.max_staleness != 0:
            object.__setattr__(self, "max_staleness", 0)
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


class ActorLoopSettings(_Group):
    """How an actor steps its envs and talks to the weightserver."""

    vectorization: Literal["sync", "async"] = Field(
        "sync", description="Step envs in this process (sync) or in subprocesses (async)."
    )
    weights_timeout_ms: int = Field(2000, ge=1, description="Weightserver request timeout.")
    batches_per_version: int = Field(
        1,
        ge=0,
        description="Batches an actor sends per policy version before it waits for a newer "
        "one (flow control: bounds staleness and waste); 0: never wait. Sync mode uses 1.",
    )
    resend_after_s: float = Field(
        5.0,
        gt=0,
        description="An actor that has waited this long for a newer version sends another "
        "batch with the one it holds: a learner that lost its batches (a restart, a network "
        "cut) would otherwise wait for them forever.",
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

    redis_url: str | None = Field(  # type: ignore[assignment]
        None,
        description="Use this Redis instead of starting an embedded redis-server.",
        json_schema_extra=SECRET,
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
    restart_actors: bool = Field(True, description="Restart an actor that crashes.")
    progress: bool = Field(True, description="Show live progress on the terminal.")


def add_settings_arguments(
    parser: argparse.ArgumentParser, cls: type[BaseSettings]
) -> CliSettingsSource[Any]:
    """`--config` and one `--kebab-name` flag per field (`--x/--no-x` for a bool), each
    documented with its variable and default; pydantic-settings' CLI source writes them.

    Unset flags stay absent, so that lower layers (env, config file, defaults) show through.
    `source(parsed_args=args)()` gives the flags that were given, by field name.
    """
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="TOML file of settings: flat keys, the same names as the flags with "
        "underscores; an unknown key or a [table] is an error.",
    )
    return CliSettingsSource(
        cls,
        root_parser=parser,
        cli_prog_name=parser.prog,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_avoid_json=True,
        cli_hide_none_type=True,
        cli_show_env_vars=True,
    )


def _read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise UsageError(f"config file {path} not found; check the --config path") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    # Flat keys only, each a setting of some service: one file serves every service (each
    # takes the settings it reads), so a table ([learner], [actor]...) has no meaning here.
    # A key nothing reads is refused, as a misspelt flag is, never dropped without a word.
    known = setting_names()
    for key, value in data.items():
        if isinstance(value, dict):
            raise UsageError(
                f"config file {path}: table [{key}] is not supported; write its settings as "
                "flat keys at the top of the file (one file serves every service, each "
                "reads the settings it has)"
            )
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else "; see docs/SETTINGS.md"
            raise UsageError(f"config file {path}: unknown setting {key!r}{hint}")
    return data


def setting_names() -> set[str]:
    """Every setting any service reads (the fields of every settings group)."""
    names: set[str] = set()
    classes: list[type[BaseSettings]] = [_Group]
    while classes:
        c = classes.pop()
        names.update(c.model_fields)
        classes.extend(c.__subclasses__())
    return names


def format_validation_error(exc: ValidationError) -> str:
    """The first problem, on one line, naming the setting as the user would type it."""
    err = exc.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    loc = ".".join(str(p) for p in err.get("loc", ()))
    if not loc:
        return f"settings: {msg}"
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f" (got {redact_value(loc, value)!r})"
    flag = "--" + loc.replace("_", "-")
    return f"setting {loc} ({flag} / {ENV_PREFIX}{loc.upper()}): {msg}{shown}"


def load_settings(
    cls: type[S], flags: dict[str, Any] | None = None, config_file: str | None = None
) -> S:
    """Build `cls` from its layers, defaults < preset < config file < env < flags; a bad
    value or an unknown preset is a one-line `UsageError`.

    The preset's name is itself a setting (flag, then variable, then config file); only
    the preset's values that are fields of `cls` apply (an actor takes no learning rate).
    """
    flags = dict(flags or {})
    config_file = flags.pop("config", None) or config_file or os.environ.get(ENV_PREFIX + "CONFIG")
    file_values: dict[str, Any] = {}
    if config_file:
        file_values = {k: v for k, v in _read_config(config_file).items() if k in cls.model_fields}
    preset_values: dict[str, Any] = {}
    if "preset" in cls.model_fields:
        name = flags.get("preset", os.environ.get(ENV_PREFIX + "PRESET", file_values.get("preset")))
        if name:
            preset = read_preset(str(name))
            preset_values = {k: v for k, v in preset.items() if k in cls.model_fields}

    class _Layered(cls):  # type: ignore[valid-type,misc]
        @classmethod
        def settings_customise_sources(cls_, settings_cls, init_settings, env_settings, **_):
            return (init_settings, env_settings, lambda: file_values, lambda: preset_values)

    _Layered.__name__ = cls.__name__
    try:
        loaded = _Layered(**flags)
    except ValidationError as exc:
        raise UsageError(format_validation_error(exc)) from None
    return cls.model_validate(loaded.model_dump())


def settings_env(settings: BaseSettings) -> dict[str, str]:
    """The `PPOMQ_*` variables that reproduce `settings` in a child process."""
    out = {}
    for name, value in settings.model_dump().items():
        if value is None:
            continue  # every optional field defaults to None: unset means the same
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list | tuple):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        out[ENV_PREFIX + name.upper()] = text
    return out


def is_secret(name: str, cls: type[BaseSettings] | None = None) -> bool:
    """Whether setting `name` holds a secret: marked SECRET in `cls` (in any settings
    group when `cls` is None), or named like one."""
    if _SECRET_NAME.search(name):
        return True
    classes = [cls] if cls is not None else _Group.__subclasses__()
    while classes:
        c = classes.pop()
        info = c.model_fields.get(name)
        extra = info.json_schema_extra if info is not None else None
        if isinstance(extra, dict) and extra.get("secret"):
            return True
        if cls is None:
            classes.extend(c.__subclasses__())
    return False


def redact_value(name: str, value: Any, cls: type[BaseSettings] | None = None) -> Any:
    """`value` of setting `name` as it may be written down: a secret's URL keeps all but its
    password, any other secret is `***`; a URL's password is hidden in every setting."""
    from .redis_util import REDACTED, redact_text, redact_url

    if isinstance(value, list | tuple):
        return [redact_value(name, v, cls) for v in value]
    if value is None or value == "":
        return value
    if is_secret(name, cls):
        return redact_url(value) if isinstance(value, str) and "://" in value else REDACTED
    return redact_text(value) if isinstance(value, str) else value


def redact_settings(values: dict[str, Any], cls: type[BaseSettings]) -> dict[str, Any]:
    """`values` (settings by name) with every secret redacted: what may go on disk or in a log."""
    return {name: redact_value(name, value, cls) for name, value in values.items()}


def settings_snapshot(settings: BaseSettings, **extra: Any) -> dict[str, Any]:
    """JSON-ready dict of every field (what a run dir records), with secrets redacted;
    `extra` (values the caller settled, e.g. the URL of the Redis it started) goes in first."""
    doc = {**settings.model_dump(mode="json"), **extra}
    return redact_settings(doc, type(settings))


__all__ = [
    "CommonSettings",
    "CurveClientSettings",
    "CurveServerSettings",
    "EnvSettings",
    "PresetSettings",
    "RedisSettings",
    "TransportSettings",
    "WeightStoreSettings",
    "WeightserverSettings",
    "add_settings_arguments",
    "is_secret",
    "load_settings",
    "preset_names",
    "preset_summary",
    "preset_text",
    "read_preset",
    "redact_settings",
    "redact_value",
    "settings_env",
    "settings_snapshot",
]


def settings_table() -> str:
    """docs/SETTINGS.md: every setting, its variable, default, and which services read it."""
    services = {
        "train": TrainSettings,
        "learner": LearnerSettings,
        "actor": ActorSettings,
        "weightserver": WeightserverSettings,
    }
    names: dict[str, Any] = {}
    for cls in services.values():
        for name, info in cls.model_fields.items():
            names.setdefault(name, info)
    lines = [
        "# Settings",
        "",
        "Generated by `python -m ppomq.settings` from src/ppomq/settings.py; a test keeps it",
        "current. Layers: defaults < `--preset NAME` (src/ppomq/presets/NAME.toml) <",
        "`--config FILE` (TOML) < `PPOMQ_*` variables < flags.",
        "",
        "| setting | flag | variable | default | read by | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(names):
        info = names[name]
        users = ", ".join(s for s, cls in services.items() if name in cls.model_fields)
        default = info.default
        shown = "" if default in ("", None) else f"`{default}`"
        flag = "--" + name.replace("_", "-")
        desc = (info.description or "").replace("|", "\\|")
        lines.append(
            f"| {name} | `{flag}` | `{ENV_PREFIX}{name.upper()}` | {shown} | {users} | {desc} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(settings_table(), end="")
