"""The episode book: episode figures from the batches' own data, claims checked against it."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.messages.factory import make_batch, whole_episodes
from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.core.models import build_model, model_spec_for
from ppomq.learner.episodes import Carry, EpisodeBook, episodes_in
from ppomq.proto import DecodeError, EpisodeStats

T, N = 4, 2


def _spec():
    return rollout_spec_for("CartPole-v1", run_id="r", num_steps=T, max_bytes=1 << 24)


def _batch(seq: int, rewards, ends, claims, actor_id: str = "a", **extra):
    b = make_batch(_spec(), np.random.default_rng(seq), seq=seq, actor_id=actor_id, n=N)
    b.arrays["rewards"] = np.asarray(rewards, dtype=np.float32)
    b.arrays["terminated"] = np.asarray(ends, dtype=bool)
    b.arrays["truncated"] = np.zeros((T, N), dtype=bool)
    b.arrays.update(extra)
    b.episodes = EpisodeStats([c[0] for c in claims], [c[1] for c in claims])
    return b


def test_episodes_are_summed_across_batches_and_start_known_only_where_seen():
    scores = np.ones((T, N), dtype=np.float32)
    ends = np.zeros((T, N), dtype=bool)
    ends[1, 0] = ends[3, 1] = True
    carry = Carry(np.array([5.0, 0.0]), np.array([5, 0]), np.array([True, False]))
    ended, after = episodes_in(scores, ends, carry)
    assert [(e.ret, e.length, e.known) for e in ended] == [(7.0, 7, True), (4.0, 4, False)]
    assert after.ret.tolist() == [2.0, 0.0] and after.length.tolist() == [2, 0]
    assert after.known.tolist() == [True, True]
    assert carry.ret.tolist() == [5.0, 0.0]  # pure


def test_the_book_follows_an_actor_from_seq_0_and_counts_what_its_data_makes():
    book = EpisodeBook()
    ends = np.zeros((T, N), dtype=bool)
    ends[2, 0] = True
    first = _batch(0, np.full((T, N), 2.0), ends, [(6.0, 3)])
    book.verify(first)
    assert first.verified == EpisodeStats([6.0], [3]) and first.unverified == 0
    ends = np.zeros((T, N), dtype=bool)
    ends[0, 0] = ends[1, 1] = True  # env 0: 1 step carried + 1; env 1: 4 carried + 2
    second = _batch(1, np.full((T, N), 2.0), ends, [(4.0, 2), (12.0, 6)])
    book.verify(second)
    assert second.verified == EpisodeStats([4.0, 12.0], [2, 6])


def test_a_claimed_return_of_1e6_is_refused_and_leaves_the_book_as_it_was():
    book = EpisodeBook()
    ends = np.zeros((T, N), dtype=bool)
    ends[3, :] = True
    with pytest.raises(DecodeError) as refused:
        book.verify(_batch(0, np.ones((T, N)), ends, [(1e6, 4), (4.0, 4)]))
    assert refused.value.reason.label == "episodes_mismatch"
    honest = _batch(0, np.ones((T, N)), ends, [(4.0, 4), (4.0, 4)])
    book.verify(honest)  # seq 0 again: the refused batch moved nothing
    assert honest.verified == EpisodeStats([4.0, 4.0], [4, 4])


@pytest.mark.parametrize(
    "claims", [[], [(4.0, 4)], [(4.0, 4), (4.0, 4), (4.0, 4)], [(4.0, 3), (4.0, 4)]]
)
def test_claims_must_be_the_episodes_that_ended(claims):
    ends = np.zeros((T, N), dtype=bool)
    ends[3, :] = True
    with pytest.raises(DecodeError, match="claimed"):
        EpisodeBook().verify(_batch(0, np.ones((T, N)), ends, claims))


def test_after_a_gap_the_episode_in_flight_is_unverified_and_left_out():
    book = EpisodeBook()
    book.verify(whole_episodes(make_batch(_spec(), np.random.default_rng(0), seq=0, n=N)))
    ends = np.zeros((T, N), dtype=bool)
    ends[1, 0] = ends[3, 0] = True
    # seq 5 after 0: where env 0's first episode started is unknown; any claimed return
    # passes (it cannot be checked) but only the second episode, seen whole, counts.
    b = _batch(5, np.ones((T, N)), ends, [(1e6, 9), (2.0, 2)])
    book.verify(b)
    assert b.verified == EpisodeStats([2.0], [2]) and b.unverified == 1
    short = _batch(7, np.ones((T, N)), ends, [(1.0, 1), (2.0, 2)])
    with pytest.raises(DecodeError, match="claimed 1 steps, 2 are in the batch"):
        book.verify(short)


def test_scores_and_episode_ends_decide_where_the_rewards_are_clipped():
    """Atari: sign-clipped rewards, a lost life ends the training episode, the game goes
    on; the figures are the raw scores of whole games."""
    clipped = np.ones((T, N))
    lives = np.zeros((T, N), dtype=bool)
    lives[1, 0] = lives[3, 0] = True  # two training-episode ends on env 0 ...
    game_over = np.zeros((T, N), dtype=bool)
    game_over[3, 0] = True  # ... one game
    scores = np.full((T, N), 50.0, dtype=np.float32)
    b = _batch(0, clipped, lives, [(200.0, 4)], scores=scores, episode_ends=game_over)
    EpisodeBook().verify(b)
    assert b.verified == EpisodeStats([200.0], [4])


@pytest.mark.parametrize("norm_reward", [False, True])
def test_an_actors_claims_are_what_the_book_derives_batch_after_batch(norm_reward):
    spec = rollout_spec_for("CartPole-v1", run_id="r", num_steps=16, max_bytes=1 << 24)
    envs = make_vector_env("CartPole-v1", 4, [env_seed(0, 0, i) for i in range(4)])
    runner = EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a", env_id="CartPole-v1")
    if norm_reward:  # rewards scaled for training: the episodes come from `scores`
        runner.configure_rewards({"gamma": 0.99, "clip": 10.0, "epsilon": 1e-8})
    policy = build_model(model_spec_for(spec, hidden=[8])).inference()
    book, counted = EpisodeBook(), 0
    for seq in range(12):
        batch = runner.sample(policy, policy_version=0, seq=seq)
        assert ("scores" in batch.arrays) == norm_reward
        book.verify(batch)
        assert batch.verified == batch.episodes and batch.unverified == 0
        counted += len(batch.verified.returns)
    assert counted > 4
    assert all(r == float(int(r)) for r in batch.verified.returns)  # CartPole: +1 a step


def _first_refusal(claimed: EpisodeStats, derived: list) -> str | None:
    """check_claims' rule, one claim at a time: the reference for the array version."""
    if len(claimed.returns) != len(derived):
        return "count"
    for i, (ret, length, ep) in enumerate(
        zip(claimed.returns, claimed.lengths, derived, strict=True)
    ):
        if ep.known:
            if length != ep.length or not np.isclose(ret, ep.ret, rtol=1e-6, atol=1e-6):
                return f"episode {i}:"
        elif length < ep.length:
            return f"episode {i}:"
    return None


@pytest.mark.parametrize("seed", range(6))
def test_the_first_wrong_claim_of_thousands_is_the_one_named(seed):
    from ppomq.learner.episodes import check_claims

    rng = np.random.default_rng(seed)
    t, n = 64, 256
    ends = rng.random((t, n)) < 0.05
    scores = rng.random((t, n)).astype(np.float32)
    carry = Carry(np.zeros(n), rng.integers(0, 50, n), rng.random(n) < 0.5)
    derived, _ = episodes_in(scores, ends, carry)
    assert len(derived) > 500 and any(not e.known for e in derived)
    returns, lengths = [e.ret for e in derived], [e.length for e in derived]
    assert check_claims(EpisodeStats(returns, lengths), derived) is None
    # Unverified episodes may be claimed longer (their start was not seen), never shorter.
    unknown = [i for i, e in enumerate(derived) if not e.known]
    longer = [x + 7 if i in unknown else x for i, x in enumerate(lengths)]
    assert check_claims(EpisodeStats(returns, longer), derived) is None
    for i in sorted(rng.choice(len(derived), 3, replace=False)):
        for bad in (
            EpisodeStats([*returns[:i], returns[i] + 1e-3, *returns[i + 1 :]], lengths),
            EpisodeStats(returns, [*lengths[:i], lengths[i] - 1 or 2, *lengths[i + 1 :]]),
            EpisodeStats(returns, [*lengths[:i], 2**70, *lengths[i + 1 :]]),  # beyond int64
        ):
            want = _first_refusal(bad, derived)
            got = check_claims(bad, derived)
            assert (got is None) == (want is None), (i, got, want)
            if want is not None:
                assert got.startswith(want), (got, want)
