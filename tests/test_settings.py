"""The settings model: four layers in order, one-line errors, the same names everywhere."""

from __future__ import annotations

import argparse

import pytest

from ppomq.errors import UsageError
from ppomq.settings import (
    LearnerSettings,
    TrainSettings,
    add_settings_arguments,
    load_settings,
    settings_env,
)


def test_layers_apply_in_order_defaults_file_env_flags(tmp_path, monkeypatch):
    cfg = tmp_path / "run.toml"
    cfg.write_text('gamma = 0.9\nclip_coef = 0.3\nrun_id = "from-file"\n')
    monkeypatch.setenv("PPOMQ_CLIP_COEF", "0.25")
    monkeypatch.setenv("PPOMQ_RUN_ID", "from-env")
    s = load_settings(LearnerSettings, {"run_id": "from-flag"}, config_file=str(cfg))
    assert s.gamma == 0.9  # file over default
    assert s.clip_coef == 0.25  # env over file
    assert s.run_id == "from-flag"  # flag over env
    assert s.gae_lambda == 0.8  # default


def test_every_field_has_a_flag_and_a_description():
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, TrainSettings)
    flags = {a.dest for a in parser._actions}
    for name, info in TrainSettings.model_fields.items():
        assert name in flags
        assert info.description, name


def test_flags_parse_into_the_model():
    parser = argparse.ArgumentParser()
    flags = add_settings_arguments(parser, TrainSettings)
    args = parser.parse_args(["--max-staleness", "3", "--no-anneal-lr", "--mode", "sync"])
    s = load_settings(TrainSettings, flags(parsed_args=args)())
    assert s.anneal_lr is False and s.mode == "sync"
    assert s.max_staleness == 0  # sync mode is staleness 0 by definition


def test_unset_flags_leave_env_and_file_alone(tmp_path, monkeypatch):
    cfg = tmp_path / "run.toml"
    cfg.write_text("gamma = 0.9\nseed = 7\n[actor]\nnum_envs = 3\n")
    monkeypatch.setenv("PPOMQ_ANNEAL_LR", "false")
    parser = argparse.ArgumentParser()
    flags = add_settings_arguments(parser, LearnerSettings)
    args = parser.parse_args(["--config", str(cfg), "--seed", "9"])
    s = load_settings(LearnerSettings, flags(parsed_args=args)(), args.config)
    assert (s.gamma, s.seed, s.anneal_lr, s.num_envs) == (0.9, 9, False, 8)


@pytest.mark.parametrize(
    "flags",
    [{"gamma": 2.0}, {"gamma": "x"}, {"mode": "bogus"}, {"hidden_sizes": "64,x"},
     {"hidden_sizes": "0"}, {"activation": "gelu"}],
)  # fmt: skip
def test_bad_value_is_one_line_naming_flag_and_variable(flags):
    with pytest.raises(UsageError) as err:
        load_settings(LearnerSettings, flags)
    text = str(err.value)
    flag, name = next(iter(flags)).replace("_", "-"), next(iter(flags)).upper()
    assert f"--{flag}" in text and f"PPOMQ_{name}" in text and "\n" not in text


def test_more_staleness_than_versions_kept_is_refused():
    with pytest.raises(UsageError, match="keep-versions"):
        load_settings(LearnerSettings, {"max_staleness": 5, "keep_versions": 3})


def test_missing_config_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_settings(LearnerSettings, {}, config_file=str(tmp_path / "nope.toml"))


def test_settings_env_round_trips_through_the_environment(monkeypatch):
    s = load_settings(TrainSettings, {"target_return": 400.0, "anneal_lr": False})
    for key, value in settings_env(s).items():
        if key != "PPOMQ_REDIS_URL":
            monkeypatch.setenv(key, value)
    assert load_settings(TrainSettings, {}) == s


def test_docs_settings_table_is_current():
    from pathlib import Path

    from ppomq.settings import settings_table

    doc = Path(__file__).resolve().parent.parent / "docs" / "SETTINGS.md"
    assert doc.read_text() == settings_table(), "run: python -m ppomq.settings > docs/SETTINGS.md"


def test_model_settings_names_defaults_and_choices():
    fields = LearnerSettings.model_fields
    defaults = {
        n: fields[n].default for n in ("activation", "norm_obs", "norm_reward", "gradients")
    }
    assert defaults == {
        "activation": "tanh",
        "norm_obs": False,
        "norm_reward": False,
        "gradients": "auto",
    }
    for name, value in [
        ("activation", "relu"),
        ("gradients", "analytic"),
        ("gradients", "autograd"),
    ]:
        assert getattr(load_settings(LearnerSettings, {name: value}), name) == value
    with pytest.raises(UsageError, match="--activation"):
        load_settings(LearnerSettings, {"activation": "gelu"})
