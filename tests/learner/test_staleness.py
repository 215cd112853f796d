"""The staleness gate: age in versions, rejections counted and never admitted."""

from ppomq.learner.staleness import StalenessGate, batch_age


def test_age_is_learner_version_minus_batch_version():
    assert batch_age(10, 7) == 3


def test_batches_older_than_max_staleness_are_rejected_and_counted():
    gate = StalenessGate(max_staleness=2)
    assert gate.admit(10, 10) and gate.admit(10, 8)
    assert not gate.admit(10, 7)
    assert gate.rejected == {"stale": 1}
    assert gate.accepted == 2
    assert dict(gate.ages) == {0: 1, 2: 1}


def test_sync_mode_gate_admits_only_the_current_version():
    gate = StalenessGate(max_staleness=0)
    assert gate.admit(5, 5)
    assert not gate.admit(5, 4)


def test_batches_from_a_future_version_are_rejected():
    gate = StalenessGate(max_staleness=3)
    assert not gate.admit(5, 6)
    assert gate.rejected == {"future_version": 1}
