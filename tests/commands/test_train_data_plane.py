"""`ppomq train`'s data plane from its flags: CURVE unless --no-curve, and the first line
says which (src/ppomq/launch/dataplane.py)."""

from __future__ import annotations

import argparse
import os

import pytest

from ppomq.core.errors import UsageError
from ppomq.core.settings import TrainSettings
from ppomq.core.settings.layering import add_settings_arguments, load_settings
from ppomq.launch.dataplane import describe_data_plane


@pytest.fixture(autouse=True)
def _no_ppomq_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("PPOMQ_")]:
        monkeypatch.delenv(name)


def _train(*argv: str) -> TrainSettings:
    """TrainSettings as `ppomq train ARGV` builds them (flags < nothing else)."""
    parser = argparse.ArgumentParser(prog="ppomq train")
    source = add_settings_arguments(parser, TrainSettings)
    return load_settings(TrainSettings, source(parsed_args=parser.parse_args(list(argv)))())


def test_curve_is_the_default_and_no_curve_is_named_unauthenticated():
    assert _train().curve is True
    assert describe_data_plane(_train()) == "CURVE, keys in RUN_DIR/keys"
    plain = _train("--no-curve")
    assert plain.curve is False
    line = describe_data_plane(plain)
    assert line.startswith("plain ZeroMQ on loopback, unauthenticated (--no-curve)"), line
    assert "any local process may send rollouts" in line


def test_no_curve_beyond_loopback_is_refused_in_one_line():
    with pytest.raises(UsageError) as err:
        describe_data_plane(_train("--no-curve", "--weightserver-bind", "tcp://*:5556"))
    text = str(err.value)
    assert "\n" not in text and "tcp://*:5556 reaches beyond loopback" in text
    assert "drop --no-curve" in text and "--insecure-plaintext" in text
    # With CURVE (the default) the same bind is fine.
    assert describe_data_plane(_train("--weightserver-bind", "tcp://*:5556")).startswith("CURVE")
