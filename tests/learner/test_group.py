"""A learner group on real processes (gloo over loopback): every rank ends each update
with bit-identical parameters, and the group's update is the one a learner alone makes on
every rank's batches together, whatever each rank holds."""

from __future__ import annotations

import numpy as np
import pytest

from ppomq.core.errors import UsageError
from ppomq.learner.group import GroupSpec, straggler_quorum
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from tests.support.group_ranks import batches_for, fresh_policy, run_group, trained_state
from tests.support.ports import free_port

ONE_MINIBATCH = dict(anneal_lr=False, learning_rate=3e-3, update_epochs=4, minibatch_size=0)


def _alone_on_every_ranks_batches(plans: list[list[list[int]]], config: dict) -> list[dict]:
    """A learner alone, update u trained on every rank's batches of update u in rank order."""
    trainer = PPOTrainer(policy=fresh_policy(), config=PPOConfig(**config))
    states, stats = [], []
    for u in range(len(plans[0])):
        stats.append(trainer.update(batches_for([s for plan in plans for s in plan[u]]), 0))
        states.append(trained_state(trainer))
    return [{"states": states, "stats": stats}]


def _assert_ranks_identical(ranks: list[dict]) -> None:
    for u, state in enumerate(ranks[0]["states"]):
        for other in ranks[1:]:
            for name, value in state.items():
                assert np.array_equal(value, other["states"][u][name]), (u, name)


def _assert_close(group: dict, alone: dict) -> None:
    for u, state in enumerate(alone["states"]):
        for name, value in state.items():
            np.testing.assert_allclose(group["states"][u][name], value, rtol=1e-5, atol=1e-6)
    for g, a in zip(group["stats"], alone["stats"], strict=True):
        for key in ("losses/approx_kl", "losses/value_loss", "losses/explained_variance"):
            assert g[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
        assert g["charts/samples"] == a["charts/samples"]


@pytest.mark.parametrize("extra", [{}, {"norm_returns": True}], ids=["plain", "norm-returns"])
def test_the_group_update_is_one_learners_update_on_the_concatenated_batch(tmp_path, extra):
    # With --norm-returns the return statistics, too, are the union's on every rank.
    config = {**ONE_MINIBATCH, **extra}
    plans = [[[1, 2], [5]], [[3], [6, 7]]]  # uneven batches: the gradient is sample-weighted
    ranks = run_group(plans, config, tmp_path, free_port())
    _assert_ranks_identical(ranks)
    _assert_close(ranks[0], _alone_on_every_ranks_batches(plans, config)[0])


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "unshuffled"])
def test_three_ranks_with_several_minibatches_hold_bit_identical_parameters(tmp_path, shuffle):
    config = dict(anneal_lr=False, learning_rate=3e-3, update_epochs=3, minibatch_size=32,
                  objective="kl-penalty", target_kl=0.5, shuffle_minibatches=shuffle)  # fmt: skip
    plans = [[[1], [4, 5]], [[2, 3], [6]], [[7], [8]]]
    ranks = run_group(plans, config, tmp_path, free_port())
    _assert_ranks_identical(ranks)
    before = trained_state(PPOTrainer(policy=fresh_policy(), config=PPOConfig(**config)))
    assert any(not np.array_equal(before[k], ranks[0]["states"][-1][k]) for k in before)


def test_a_rank_whose_actors_vanished_still_takes_part_with_nothing(tmp_path):
    plans = [[[1], [4]], [[2, 3], [5]], [[], []]]  # rank 2 holds no batch in either update
    ranks = run_group(plans, ONE_MINIBATCH, tmp_path, free_port())
    _assert_ranks_identical(ranks)
    _assert_close(ranks[2], _alone_on_every_ranks_batches(plans, ONE_MINIBATCH)[0])


def test_a_learner_alone_when_world_size_is_unset_or_one():
    assert GroupSpec.from_env({}) is None
    assert GroupSpec.from_env({"WORLD_SIZE": "1", "RANK": "0"}) is None


def test_torchruns_environment_makes_the_spec():
    spec = GroupSpec.from_env({"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "h",
                               "MASTER_PORT": "29500", "LOCAL_RANK": "1",
                               "TORCHELASTIC_USE_AGENT_STORE": "True"})  # fmt: skip
    assert spec == GroupSpec(rank=1, world_size=4, master_addr="h", master_port=29500,
                             local_rank=1, agent_store=True)  # fmt: skip


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR, MASTER_PORT unset"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "not in 0..1"),
        ({"WORLD_SIZE": "two", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "integers"),
    ],
)
def test_a_half_given_group_environment_is_one_line_saying_what_is_missing(env, words):
    with pytest.raises(UsageError, match=words):
        GroupSpec.from_env(env)


@pytest.mark.parametrize(
    ("world", "frac", "quorum"), [(4, 1.0, 4), (4, 0.6, 3), (8, 0.6, 5), (2, 0.1, 1), (1, 0.6, 1)]
)
def test_the_straggler_quorum_is_the_fraction_of_ranks_rounded_up(world, frac, quorum):
    assert straggler_quorum(world, frac) == quorum
