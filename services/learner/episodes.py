"""The episode book: a run's episode figures derived from the rollouts themselves.

What decides "solved", --target-return, the progress line and the summary is never a
sender's claim. Each actor's batches are followed in `seq` order: per env, the return so far
(summed from `scores`, or `rewards` where the batch sends none) and the length so far
(steps), carried from one batch to the next. An episode ends where `episode_ends` says (or
`terminated | truncated`). An episode whose whole span the learner saw (from the actor's
first batch, `seq` 0, or from an end in a batch it saw) is *verified*: its return and
length are the learner's own sums. One whose start it missed (a batch lost in flight, a
learner restart) is *unverified*: counted apart, left out of every figure.

The header's `episodes` (the actor's claims) are checked against this: as many as ends,
each verified one with the same length and return, each unverified one at least as long as
its part in the batch. A batch that claims otherwise is refused (`episodes_mismatch`) and
leaves the book as it was.

Fed by the receiving thread with every valid batch in arrival order (stale or surplus
ones too: they carry the episode forward), so that continuity holds whatever the gate
later decides. Bounded in actors like the rest of the learner's per-actor state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ppomq.proto import DecodeError, EpisodeStats, Reason, RolloutBatch

# Claims are the actor's float64 sums of the same float32 values: equal but for the order
# of additions, which a conforming actor in another language may choose differently.
RTOL, ATOL = 1e-6, 1e-6


@dataclass
class Carry:
    """Per env of one actor, at the end of its last batch: the return and length of the
    episode in progress, and whether its start was seen."""

    ret: np.ndarray  # float64 [N]
    length: np.ndarray  # int64 [N]
    known: np.ndarray  # bool [N]

    @classmethod
    def fresh(cls, n: int, *, known: bool) -> Carry:
        return cls(np.zeros(n), np.zeros(n, dtype=np.int64), np.full(n, known))


@dataclass(frozen=True)
class Ended:
    """One episode that ended inside a batch, in step-major order (step, then env)."""

    ret: float
    length: int
    known: bool


def episodes_in(scores: np.ndarray, ends: np.ndarray, carry: Carry) -> tuple[list[Ended], Carry]:
    """The episodes ending in a batch of per-step `scores` [T, N] and `ends` [T, N],
    starting from `carry`; and the carry after it. Pure: `carry` is not changed."""
    ret, length, known = carry.ret.copy(), carry.length.copy(), carry.known.copy()
    out: list[Ended] = []
    for t in range(scores.shape[0]):
        ret += scores[t]  # the same additions, in the same order, as the actor's
        length += 1
        ended = np.flatnonzero(ends[t])
        if ended.size:
            out.extend(Ended(float(ret[i]), int(length[i]), bool(known[i])) for i in ended)
            ret[ended] = 0.0
            length[ended] = 0
            known[ended] = True
    return out, Carry(ret, length, known)


def check_claims(claimed: EpisodeStats, derived: list[Ended]) -> str | None:
    """Why the claims disagree with the derived episodes, or None."""
    if len(claimed.returns) != len(derived):
        return f"{len(claimed.returns)} episodes claimed, {len(derived)} ended in the batch"
    try:
        first = _first_disagreement(claimed, derived)
    except OverflowError:  # a claimed length beyond int64: the per-episode loop decides
        first = 0
    if first is None:
        return None
    pairs = zip(claimed.returns[first:], claimed.lengths[first:], derived[first:], strict=True)
    for i, (ret, length, ep) in enumerate(pairs, start=first):
        if ep.known:
            if length != ep.length or not np.isclose(ret, ep.ret, rtol=RTOL, atol=ATOL):
                return (
                    f"episode {i}: claimed return {ret:g} over {length} steps, the batch "
                    f"makes {ep.ret:g} over {ep.length}"
                )
        elif length < ep.length:
            return f"episode {i}: claimed {length} steps, {ep.length} are in the batch"
    return None


def _first_disagreement(claimed: EpisodeStats, derived: list[Ended]) -> int | None:
    """The index of the first claim the derived episodes refute, or None: the checks of
    `check_claims` on whole arrays. A large batch of short episodes holds thousands, and
    np.isclose on one pair at a time cost the receiving thread tens of ms per batch."""
    if not derived:
        return None
    n = len(derived)
    ret = np.fromiter((e.ret for e in derived), np.float64, n)
    length = np.fromiter((e.length for e in derived), np.int64, n)
    known = np.fromiter((e.known for e in derived), bool, n)
    c_ret = np.asarray(claimed.returns, dtype=np.float64)
    c_len = np.asarray(claimed.lengths, dtype=np.int64)  # OverflowError beyond int64
    wrong = np.where(
        known, (c_len != length) | ~np.isclose(c_ret, ret, rtol=RTOL, atol=ATOL), c_len < length
    )
    bad = np.flatnonzero(wrong)
    return int(bad[0]) if bad.size else None


class EpisodeBook:
    """Per actor: the last `seq` followed and its Carry; bounded, least recent forgotten."""

    def __init__(self, max_actors: int = 1024) -> None:
        self.max_actors = max_actors
        self._actors: OrderedDict[str, tuple[int, Carry]] = OrderedDict()
        self._lock = threading.Lock()  # the loop forgets actors from its own thread

    def verify(self, batch: RolloutBatch) -> None:
        """Set `batch.verified` and `batch.unverified`, or raise EPISODES_MISMATCH."""
        arrays = batch.arrays
        scores = arrays.get("scores", arrays["rewards"])
        ends = arrays.get("episode_ends")
        if ends is None:
            ends = arrays["terminated"] | arrays["truncated"]
        with self._lock:
            last = self._actors.get(batch.actor_id)
        if last is not None and batch.seq == last[0] + 1:
            carry = last[1]
        else:
            # The actor's first batch starts every env's first episode; after a gap (or a
            # batch followed before), where each episode started is not known.
            carry = Carry.fresh(batch.num_envs, known=last is None and batch.seq == 0)
        derived, after = episodes_in(scores, ends, carry)
        why = check_claims(batch.episodes, derived)
        if why is not None:
            raise DecodeError(Reason.EPISODES_MISMATCH, f"{batch.actor_id}: {why}")
        batch.verified = EpisodeStats(
            [e.ret for e in derived if e.known], [e.length for e in derived if e.known]
        )
        batch.unverified = sum(not e.known for e in derived)
        # Followed from here on, unless it is the very batch followed last (a resend):
        # after a `seq` out of order (a spoof on a plane without CURVE, a replay) the
        # actor's next batch is a gap, which costs one unverified episode per env, no more.
        if last is None or batch.seq != last[0]:
            with self._lock:
                self._actors[batch.actor_id] = (batch.seq, after)
                self._actors.move_to_end(batch.actor_id)
                while len(self._actors) > self.max_actors:
                    self._actors.popitem(last=False)

    def forget(self, actor_id: str) -> None:
        with self._lock:
            self._actors.pop(actor_id, None)
