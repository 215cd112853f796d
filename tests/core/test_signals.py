"""WarmStop: first signal warm, second fast (cleanup still runs), shielded blocks finish."""

from __future__ import annotations

import signal

import pytest

from ppomq.core.signals import FastStop, WarmStop


def _deliver(sig: int) -> None:
    signal.raise_signal(sig)  # the handler has run when this returns (in this thread)


def test_first_signal_asks_for_a_warm_stop_and_the_second_raises_fast_stop(restore_handlers):
    stop = WarmStop().install()
    _deliver(signal.SIGTERM)
    assert stop.requested and not stop.fast
    cleaned_up = False
    with pytest.raises(FastStop):
        try:
            _deliver(signal.SIGINT)
        finally:
            cleaned_up = True
    assert stop.fast and cleaned_up
    _deliver(signal.SIGINT)  # a third is ignored: it must not cut the cleanup short


def test_a_shielded_block_is_not_cut_short_by_the_second_signal(restore_handlers):
    stop = WarmStop().install()
    _deliver(signal.SIGTERM)
    with stop.shielded():
        _deliver(signal.SIGTERM)
        finished = True
    assert finished and stop.fast
