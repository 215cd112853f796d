"""The actor's flow control comes from the learner, through each weights header."""

from __future__ import annotations

import logging

import pytest

from ppomq.actor.service import flow_limit


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (1, 1), (3, 3)])
def test_async_actors_send_as_many_batches_per_version_as_the_header_allows(value, expected):
    assert flow_limit({"batches_per_version": value}, sync=False) == expected


def test_sync_actors_send_one_and_a_header_without_the_field_means_one():
    assert flow_limit({"batches_per_version": 0}, sync=True) == 1
    assert flow_limit({}, sync=False) == 1  # a learner of an older release says nothing


@pytest.mark.parametrize("bad", [-1, 2.5, "2", True, None])
def test_a_value_that_is_not_a_count_falls_back_to_one_with_a_warning(bad, caplog):
    with caplog.at_level(logging.WARNING):
        assert flow_limit({"batches_per_version": bad}, sync=False) == 1
    assert "batches_per_version" in caplog.text
