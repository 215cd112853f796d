"""The actor's flow control comes from the learner, through each weights header."""

from __future__ import annotations

import logging

import pytest

from ppomq.actor.flow_control import FlowControl, flow_limit


@pytest.mark.parametrize(("value", "expected"), [(0, None), (1, 1), (3, 3)])
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


def test_a_version_waits_after_its_share_and_a_new_version_starts_a_new_count():
    flow = FlowControl(sync=False)
    assert not flow.must_wait_for_new
    flow.sent()
    assert flow.must_wait_for_new  # before any header says otherwise: one per version
    flow.new_version({"batches_per_version": 2})
    flow.sent()
    assert not flow.must_wait_for_new
    flow.sent()
    assert flow.must_wait_for_new
    flow.new_version({"batches_per_version": 0})
    for _ in range(5):
        flow.sent()
    assert not flow.must_wait_for_new  # 0: never wait


def test_a_sync_actor_waits_for_a_new_version_after_every_batch():
    flow = FlowControl(sync=True)
    flow.new_version({"batches_per_version": 4})
    flow.sent()
    assert flow.must_wait_for_new


def test_the_resend_timeout_is_the_setting_or_twice_the_longest_recent_interval():
    flow = FlowControl(sync=False, resend_after_s=5.0)
    assert flow.resend_after_s == 5.0  # no interval seen yet
    for t in (0.0, 1.0, 2.0):  # versions every second: a learner faster than the setting
        flow.new_version({}, now=t)
    assert flow.resend_after_s == 5.0
    flow.new_version({}, now=6.0)  # one update of 4 s: the learner is slow, not stuck
    assert flow.resend_after_s == 8.0
    for t in range(7, 7 + 8):  # eight quick versions later the slow one is forgotten
        flow.new_version({}, now=float(t))
    assert flow.resend_after_s == 5.0


def test_an_actor_follows_its_own_grant_before_batches_per_version():
    header = {"batches_per_version": 1, "grants": {"actors": {"me": 3, "you": 0}, "others": 0}}
    assert flow_limit(header, sync=False, actor_id="me") == 3
    assert flow_limit(header, sync=False, actor_id="you") == 0  # wait: nothing granted
    assert flow_limit(header, sync=False, actor_id="new") == 0
    everyone = {"grants": {"actors": {}, "others": 2}}
    assert flow_limit(everyone, sync=False, actor_id="new") == 2


@pytest.mark.parametrize("bad", [[1], {"actors": [1]}, {"actors": {"me": -1}}, {"others": "x"}])
def test_grants_it_cannot_read_fall_back_to_batches_per_version_with_a_warning(bad, caplog):
    with caplog.at_level(logging.WARNING):
        got = flow_limit({"batches_per_version": 2, "grants": bad}, sync=False, actor_id="me")
    assert got == 2 and "grants" in caplog.text


def test_an_actor_granted_nothing_waits_and_says_hello_now_and_then():
    flow = FlowControl(sync=False, actor_id="me")
    flow.new_version({"grants": {"actors": {"me": 0}, "others": 1}}, now=0.0)
    assert flow.must_wait_for_new  # before sending anything
    assert flow.hello_due(now=0.0)
    assert not flow.hello_due(now=0.5)
    assert flow.hello_due(now=1.1)
    flow.new_version({"grants": {"actors": {"me": 1}, "others": 0}}, now=2.0)
    assert not flow.must_wait_for_new and not flow.hello_due(now=9.0)  # granted: no hello
