"""The settings model: four layers in order, one-line errors, the same names everywhere."""

from __future__ import annotations

import argparse

import pytest

from ppomq.core.errors import UsageError
from ppomq.core.settings import (
    ActorSettings,
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
    cfg.write_text("gamma = 0.9\nseed = 7\n")
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

    from ppomq.core.settings import settings_table

    doc = Path(__file__).resolve().parents[3] / "docs" / "reference" / "settings.md"
    regenerate = "run: python -m ppomq.core.settings > docs/reference/settings.md"
    assert doc.read_text() == settings_table(), regenerate


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


def test_unknown_key_in_a_config_file_is_one_line_naming_it_and_the_file(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("lerning_rate = 0.5\ntotal_steps = 2048\n")
    with pytest.raises(UsageError) as err:
        load_settings(TrainSettings, {}, config_file=str(cfg))
    text = str(err.value)
    assert "'lerning_rate'" in text and str(cfg) in text and "\n" not in text
    assert "did you mean learning_rate?" in text


def test_a_table_in_a_config_file_is_refused_saying_to_use_flat_keys(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("gamma = 0.99\n[learner]\nlearning_rate = 0.5\n")
    with pytest.raises(UsageError) as err:
        load_settings(LearnerSettings, {}, config_file=str(cfg))
    text = str(err.value)
    assert "[learner]" in text and "flat keys" in text and str(cfg) in text
    assert "\n" not in text


def test_one_config_file_serves_every_service_each_taking_its_own_settings(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('learning_rate = 0.0005\nvectorization = "async"\ngamma = 0.9\n')
    learner = load_settings(LearnerSettings, {}, config_file=str(cfg))
    actor = load_settings(ActorSettings, {}, config_file=str(cfg))
    assert learner.learning_rate == 0.0005 and learner.gamma == 0.9
    assert actor.vectorization == "async"


def test_a_misspelt_setting_in_a_config_file_stops_a_service_like_a_misspelt_flag(tmp_path):
    import os
    import subprocess
    import sys

    cfg = tmp_path / "run.toml"
    cfg.write_text("lerning_rate = 0.5\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    for args in (["--config", str(cfg)], ["--lerning-rate", "0.5"]):
        r = subprocess.run([sys.executable, "-m", "ppomq.cli", "learner", *args],
                           capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "lerning" in r.stderr and len(r.stderr.strip().splitlines()) == 1
