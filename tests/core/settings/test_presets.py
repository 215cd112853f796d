"""Presets: published hyper-parameters by name, one layer above the defaults and below
everything the user sets (config file, PPOMQ_* variables, flags)."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from ppomq.core.errors import UsageError
from ppomq.core.settings import (
    ActorSettings,
    LearnerSettings,
    TrainSettings,
    WeightserverSettings,
    load_settings,
    preset_names,
    preset_text,
    read_preset,
    settings_env,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _no_ppomq_env(monkeypatch):
    for key in [k for k in os.environ if k.startswith("PPOMQ_")]:
        monkeypatch.delenv(key)


def _without_preset(settings) -> dict:
    values = settings.model_dump()
    values.pop("preset")
    return values


def test_the_shipped_presets_are_cartpole_mujoco_mujoco_fast_and_atari():
    assert {"cartpole", "mujoco", "mujoco-fast", "atari"} <= set(preset_names())


@pytest.mark.parametrize("cls", [TrainSettings, LearnerSettings, ActorSettings])
def test_cartpole_preset_is_exactly_the_built_in_defaults(cls):
    with_preset = load_settings(cls, {"preset": "cartpole"})
    assert with_preset.preset == "cartpole"
    assert _without_preset(with_preset) == _without_preset(load_settings(cls, {}))


def test_cartpole_preset_sets_every_hyper_parameter_it_claims_explicitly():
    # The preset is a document of the defaults, not an empty file that matches them.
    values = read_preset("cartpole")
    claimed = "env_id gamma gae_lambda learning_rate minibatch_size update_epochs"
    claimed += " hidden_sizes activation norm_obs norm_reward"
    for name in claimed.split():
        assert name in values, name
        assert values[name] == TrainSettings.model_fields[name].default, name


def test_mujoco_preset_is_cleanrl_ppo_continuous_action_over_two_actors():
    s = load_settings(TrainSettings, {"preset": "mujoco"})
    cleanrl = dict(
        env_id="HalfCheetah-v5", total_steps=1_000_000, learning_rate=3e-4, anneal_lr=True,
        gamma=0.99, gae_lambda=0.95, update_epochs=10, clip_coef=0.2, clip_vloss=True,
        norm_adv=True, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, target_kl=None,
        hidden_sizes="64,64", activation="tanh", norm_obs=True, norm_reward=True, seed=1,
    )  # fmt: skip
    assert {k: getattr(s, k) for k in cleanrl} == cleanrl
    assert (s.mode, s.actors, s.num_envs, s.num_steps) == ("async", 2, 1, 1024)
    # CleanRL's update: num_envs 1 x num_steps 2048 = 2048 samples, 32 minibatches of 64.
    per_update = s.batch_samples or s.actors * s.num_envs * s.num_steps
    assert per_update == 2048
    assert s.minibatch_size == 64 and per_update // s.minibatch_size == 32


def test_mujoco_fast_preset_is_sample_factorys_gradient_work_on_the_mujoco_presets_model():
    fast = load_settings(TrainSettings, {"preset": "mujoco-fast"})
    cleanrl = load_settings(TrainSettings, {"preset": "mujoco"})
    # Sample Factory 2's MuJoCo example's 2 epochs of 4 minibatches, rollouts of 64, lr
    # 2.95e-3 decayed to 0 and gradient norm 3.5, on updates of 1024 samples (its: 4096).
    per_update = fast.batch_samples or fast.actors * fast.num_envs * fast.num_steps
    assert (fast.num_steps, per_update, per_update // fast.minibatch_size) == (64, 1024, 4)
    assert (fast.update_epochs, fast.learning_rate, fast.anneal_lr) == (2, 2.95e-3, True)
    assert fast.max_grad_norm == 3.5
    # A fifth of the mujoco preset's sample-gradients per env step (2 against 10).
    assert fast.update_epochs * 5 == cleanrl.update_epochs
    # Everything else is the mujoco preset's (CleanRL's).
    same = ("env_id", "total_steps", "mode", "actors", "gamma", "gae_lambda", "clip_coef",
            "clip_vloss", "norm_adv", "ent_coef", "vf_coef", "hidden_sizes", "activation",
            "norm_obs", "norm_reward", "target_kl", "eval_episodes")  # fmt: skip
    assert {k: getattr(fast, k) for k in same} == {k: getattr(cleanrl, k) for k in same}


def test_an_actor_takes_only_its_own_fields_from_a_preset():
    a = load_settings(ActorSettings, {"preset": "mujoco"})
    assert (a.env_id, a.num_envs, a.num_steps, a.mode) == ("HalfCheetah-v5", 1, 1024, "async")
    assert "learning_rate" not in ActorSettings.model_fields  # and loading did not fail on it


def test_a_service_without_presets_ignores_ppomq_preset(monkeypatch):
    monkeypatch.setenv("PPOMQ_PRESET", "no-such-preset")
    assert "preset" not in WeightserverSettings.model_fields
    load_settings(WeightserverSettings, {})


def test_atari_preset_is_cleanrl_ppo_atari_over_two_actors_with_what_breakout_measured():
    s = load_settings(TrainSettings, {"preset": "atari"})
    cleanrl = dict(
        env_id="BreakoutNoFrameskip-v4", total_steps=10_000_000, learning_rate=2.5e-4,
        anneal_lr=True, gamma=0.99, gae_lambda=0.95, update_epochs=4, clip_coef=0.1,
        norm_adv=True, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
        target_kl=None, norm_reward=False, seed=1,
    )  # fmt: skip
    assert {k: getattr(s, k) for k in cleanrl} == cleanrl
    # Sample Factory's normalize_input in place of CleanRL's / 255, and its
    # normalize_returns with an unclipped value loss, each measured on Breakout.
    assert s.norm_obs is True
    assert (s.norm_returns, s.clip_vloss) == (True, False)
    # Sample Factory's initial weights, orthogonal with gain 1 on every layer.
    assert s.init == "unit"
    assert (s.mode, s.actors, s.num_envs, s.num_steps) == ("async", 2, 4, 128)
    # CleanRL's update: num_envs 8 x num_steps 128 = 1024 samples, 4 minibatches of 256.
    per_update = s.batch_samples or s.actors * s.num_envs * s.num_steps
    assert per_update == 1024
    assert s.minibatch_size == 256 and per_update // s.minibatch_size == 4


@pytest.mark.parametrize("name", ["cartpole", "mujoco", "mujoco-fast", "atari"])
def test_every_preset_value_is_a_valid_setting_that_cites_its_source(name):
    values = read_preset(name)
    unknown = set(values) - set(TrainSettings.model_fields)
    assert not unknown, f"{name}.toml: {unknown} are not settings"
    TrainSettings.model_validate(values)
    for line in preset_text(name).splitlines():
        if line and not line.startswith("#"):
            assert re.search(r"#\s*\[\w+\]", line), f"{name}.toml: no cited source: {line!r}"
    assert preset_text(name).startswith("# "), "the first line says what the preset is"


def test_precedence_defaults_preset_file_env_flags(tmp_path, monkeypatch):
    cfg = tmp_path / "run.toml"
    cfg.write_text("gae_lambda = 0.5\nvf_coef = 0.7\nclip_coef = 0.3\n")
    monkeypatch.setenv("PPOMQ_VF_COEF", "0.6")
    monkeypatch.setenv("PPOMQ_CLIP_COEF", "0.25")
    s = load_settings(TrainSettings, {"preset": "mujoco", "clip_coef": 0.1}, config_file=str(cfg))
    assert s.max_staleness == 2  # default (no preset sets it)
    assert s.gamma == 0.99  # preset over default
    assert s.gae_lambda == 0.5  # config file over preset (0.95)
    assert s.vf_coef == 0.6  # env over config file and preset
    assert s.clip_coef == 0.1  # flag over env, config file and preset


def test_preset_name_comes_from_flag_then_env_then_config_file(tmp_path, monkeypatch):
    cfg = tmp_path / "run.toml"
    cfg.write_text('preset = "mujoco"\n')
    assert load_settings(TrainSettings, {}, config_file=str(cfg)).env_id == "HalfCheetah-v5"
    monkeypatch.setenv("PPOMQ_PRESET", "cartpole")
    assert load_settings(TrainSettings, {}, config_file=str(cfg)).env_id == "CartPole-v1"
    flagged = load_settings(TrainSettings, {"preset": "mujoco"}, config_file=str(cfg))
    assert flagged.env_id == "HalfCheetah-v5"
    none = load_settings(TrainSettings, {"preset": ""})  # an empty flag turns the env's off
    assert none.preset == "" and none.gamma == TrainSettings.model_fields["gamma"].default


def test_unknown_preset_is_one_usage_error_line_listing_the_presets(monkeypatch):
    with pytest.raises(UsageError) as err:
        load_settings(TrainSettings, {"preset": "go"})
    text = str(err.value)
    assert "'go'" in text and "cartpole" in text and "mujoco" in text and "atari" in text
    assert "--preset" in text and "PPOMQ_PRESET" in text and "\n" not in text
    # A name is never a path out of the presets folder.
    with pytest.raises(UsageError):
        load_settings(TrainSettings, {"preset": "../settings"})


def test_unknown_preset_given_to_the_model_directly_is_refused():
    with pytest.raises(ValueError, match="unknown preset"):
        TrainSettings(preset="go")


def test_children_of_train_rebuild_the_same_settings_from_the_environment(monkeypatch):
    """`ppomq train` hands its children every setting as PPOMQ_* (ppomq.launch.wiring),
    PPOMQ_PRESET included: the child's preset layer must not change any of them."""
    s = load_settings(TrainSettings, {"preset": "mujoco", "gamma": 0.9, "num_envs": 3})
    for key, value in settings_env(s).items():
        if key != "PPOMQ_REDIS_URL":
            monkeypatch.setenv(key, value)
    assert load_settings(TrainSettings, {}) == s


def test_the_presets_are_package_data():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools = pyproject["tool"]["setuptools"]
    assert "ppomq.presets" in setuptools["packages"]
    assert "*.toml" in setuptools["package-data"]["ppomq.presets"]
    shipped = sorted(p.stem for p in (REPO / "src" / "ppomq" / "presets").glob("*.toml"))
    assert shipped == preset_names()


def test_train_takes_the_preset_the_envs_spaces_call_for_when_none_is_named():
    """CartPole's settings used to be applied to any env without a word: Pong ran with
    them at a third of the atari preset's speed. `auto`, train's default, picks from the
    env's spaces; the settings are the picked preset's, as if it had been named."""
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    pytest.importorskip("mujoco", reason="the mujoco extra is not installed")
    for env_id, picked in [
        ("ALE/Pong-v5", "atari"),  # uint8 image observations
        ("HalfCheetah-v5", "mujoco"),  # continuous actions on vector observations
        ("Pendulum-v1", "mujoco"),
        ("CartPole-v1", "none"),  # vector observations, discrete actions
        ("MountainCar-v0", "none"),
    ]:
        auto = load_settings(TrainSettings, {"env_id": env_id})
        named = load_settings(TrainSettings, {"env_id": env_id, "preset": picked})
        assert _without_preset(auto) == _without_preset(named), env_id
        assert auto.preset == "auto", env_id
    pong = load_settings(TrainSettings, {"env_id": "ALE/Pong-v5"})
    assert (pong.num_envs, pong.num_steps, pong.learning_rate) == (4, 128, 2.5e-4)


def test_auto_says_what_in_the_spaces_chose_its_pick():
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    from ppomq.core.settings import auto_preset

    assert auto_preset("ALE/Pong-v5") == ("atari", "uint8 image observations (4, 84, 84)")
    assert auto_preset("Pendulum-v1") == (
        "mujoco", "continuous actions (1,) on vector observations (3,)"
    )  # fmt: skip
    assert auto_preset("CartPole-v1") == (
        "none",
        "float32 observations (4,) with 2 discrete actions",
    )


def test_what_the_user_sets_wins_over_the_picked_preset_and_the_env_stays(tmp_path, monkeypatch):
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    cfg = tmp_path / "run.toml"
    cfg.write_text("gamma = 0.9\nupdate_epochs = 3\n")
    monkeypatch.setenv("PPOMQ_ENV_ID", "ALE/Pong-v5")  # the pick reads the env from any layer
    monkeypatch.setenv("PPOMQ_ENT_COEF", "0.02")
    s = load_settings(TrainSettings, {"num_envs": 2, "update_epochs": 5}, config_file=str(cfg))
    assert s.env_id == "ALE/Pong-v5"  # never the preset's own env (Breakout)
    assert s.num_steps == 128 and s.learning_rate == 2.5e-4  # the preset's
    assert s.gamma == 0.9  # config file over the preset (0.99)
    assert s.ent_coef == 0.02  # variable over the preset (0.01)
    assert s.num_envs == 2 and s.update_epochs == 5  # flags over everything


def test_naming_a_preset_or_none_overrides_the_pick():
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    defaults = load_settings(TrainSettings, {"preset": "none"})
    none = load_settings(TrainSettings, {"env_id": "ALE/Pong-v5", "preset": "none"})
    assert none.preset == "none" and (none.num_steps, none.learning_rate) == (32, 1e-3)
    assert _without_preset(none) == _without_preset(defaults) | {"env_id": "ALE/Pong-v5"}
    named = load_settings(TrainSettings, {"env_id": "ALE/Pong-v5", "preset": "mujoco"})
    assert named.num_steps == 1024  # what was named, whatever the spaces say


def test_a_learner_or_actor_picks_only_when_asked_and_then_as_train_does():
    """Deployed apart (compose, Kubernetes) a learner and its actors keep what they are
    given; asked for auto, both pick the same preset from the same env."""
    pytest.importorskip("ale_py", reason="the atari extra is not installed")
    pong = {"env_id": "ALE/Pong-v5"}
    assert load_settings(LearnerSettings, pong).num_steps == 32
    assert load_settings(ActorSettings, pong).num_steps == 32
    learner = load_settings(LearnerSettings, {**pong, "preset": "auto"})
    actor = load_settings(ActorSettings, {**pong, "preset": "auto"})
    assert (learner.num_envs, learner.num_steps) == (actor.num_envs, actor.num_steps) == (4, 128)


def test_the_atari_learner_takes_every_core_it_may_use_and_the_mlp_presets_one():
    """A CNN's update gains from threads and binds on CPUs; an MLP's does not gain
    (docs/benchmarks/learner.md). 0 is resolved at the learner's start (device.py)."""
    threads = {
        name: load_settings(LearnerSettings, {"preset": name}).torch_threads
        for name in preset_names()
    }
    assert threads == {"atari": 0, "cartpole": 1, "mujoco": 1, "mujoco-fast": 1}
    flag = load_settings(LearnerSettings, {"preset": "atari", "torch_threads": 2})
    assert flag.torch_threads == 2  # the user's choice still wins
