"""The receiving thread: drains the rollout socket into a bounded queue while PPO trains.

Validation happens here, at the door: a message that fails `decode` is counted by reason
and dropped, and so is a batch older than the training thread could still train on (the
door's `stale_below`, which it keeps current: a stale flood never reaches the training
thread); only the rest reach the queue. Every count goes to the Door (door.py), which the
training thread reads. A `seq` is checked here against the last
one the loop accepted, never recorded here (the loop records it on acceptance). When the
queue is full, in sync mode this thread stops reading, the socket's high-water mark fills,
and actors block: backpressure, not loss (a synchronous update needs every actor's batch).
In async mode (`drop_oldest`) a queued batch is dropped instead to make room, counted as
surplus: the oldest of the actor with the most batches queued (BatchQueue), so an actor
that sends faster than the others loses its own batches, never theirs. Actors never wait
on a learner that cannot use all they send, and it trains on the freshest batches.
With grants (grants.py), a batch beyond its actor's grant is dropped before its decode,
counted as surplus, for the price of reading its header (paced beyond `UNGRANTED_PER_S` a
second, as refusals are), and a hello is recorded there.
Batches of a version the learner has not published (the door's `future_above`) are refused here too,
so valid-looking junk never takes a place in the queue. Refused messages are handled at
most `rejects_per_s` a second (RejectBudget): beyond that this thread pauses after each,
so a flood of junk costs the learner a bounded share of its CPU whatever its rate; every
one is still counted.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ppomq.core.transport.curvezmq import actor_id_matches_key, sender_key
from ppomq.learner.door import Attributed, Door
from ppomq.learner.episodes import EpisodeBook
from ppomq.learner.grants import GrantBook
from ppomq.proto import (
    DecodeError,
    Reason,
    RolloutBatch,
    RolloutSpec,
    SeqTracker,
    batch_key,
    decode,
    peek_sender,  # the rollout ledger's
    read_hello,
)

log = logging.getLogger(__name__)

# Refused messages handled per second, at most (and as a burst): beyond it the thread
# pauses, the socket's high-water mark fills and the flooding peer blocks; ZeroMQ
# fair-queues peers, so an honest actor's batches are still read in between. The rate
# bounds the share of the learner's CPU a flood of junk can take (benchmarks/flood.py).
REJECTS_PER_S = 500.0
# Batches beyond their actor's grant, dropped for the price of a header read, are paced at
# the same rate: with a budget ten times as large one sender flooded ten times as fast, and
# reading its batches cost the honest actors more than the pauses do (benchmarks/flood.py,
# valid-flood).
UNGRANTED_PER_S = REJECTS_PER_S


class RejectBudget:
    """A token bucket: `spend()` takes one refused message and returns how long to pause
    (0 within the budget) so that refusals stay at most `rate` a second."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self.tokens = rate  # a burst of one second's budget
        self.last = clock()

    def spend(self) -> float:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate) - 1.0
        self.last = now
        return -self.tokens / self.rate if self.tokens < 0 else 0.0


class BatchQueue(queue.Queue):
    """A bounded queue of batches whose `put_evicting` never blocks: when full, it drops
    the oldest batch of the actor with the most batches queued (ties: the oldest of all),
    through queue.Queue's hooks for subclasses (its lock and conditions)."""

    def put_evicting(self, batch: RolloutBatch) -> RolloutBatch | None:
        """Queue `batch`; returns the batch dropped to make room, if any."""
        with self.not_full:
            evicted = None
            if 0 < self.maxsize <= self._qsize():
                evicted = self._evict()
            self._put(batch)
            self.unfinished_tasks += 1
            self.not_empty.notify()
            return evicted

    def take_where(self, keep: Callable[[RolloutBatch], bool]) -> list[RolloutBatch]:
        """Remove and return the queued batches `keep` picks, without waiting."""
        with self.not_full:
            taken = [b for b in self.queue if keep(b)]
            if taken:
                self.queue = type(self.queue)(b for b in self.queue if not keep(b))
                self.not_full.notify(len(taken))
            return taken

    def _evict(self) -> RolloutBatch:
        counts = Counter(b.actor_id for b in self.queue)
        most = max(counts.values())
        for i, b in enumerate(self.queue):
            if counts[b.actor_id] == most:
                del self.queue[i]
                return b
        raise AssertionError("unreachable: a full queue has a batch")


class BatchReceiver(threading.Thread):
    """Owns the PULL socket (created inside the thread, as ZeroMQ sockets must be)."""

    def __init__(
        self,
        *,
        make_socket: Callable[[], Any],
        spec: RolloutSpec,
        out: queue.Queue[RolloutBatch],
        door: Door,
        seqs: SeqTracker,
        book: EpisodeBook | None = None,
        poll_ms: int = 20,  # how long a stop can wait for this thread (end of every run)
        rejects_per_s: float = REJECTS_PER_S,
        drop_oldest: bool = False,
        grants: GrantBook | None = None,
        ungranted_per_s: float = UNGRANTED_PER_S,
    ) -> None:
        super().__init__(name="rollout-receiver", daemon=True)
        self.grants = grants
        self._drops = RejectBudget(ungranted_per_s)
        self._make_socket = make_socket
        self.spec = spec
        self.out = out
        self.door = door
        # Read only here: the training thread records a seq when it accepts the batch, so
        # a batch refused anywhere leaves its actor's seq as it was.
        self.seqs = seqs
        # Derives each batch's episodes from its own data and checks the claims (episodes.py).
        self.book = book
        self.poll_ms = poll_ms
        self.rejects_per_s = rejects_per_s
        if drop_oldest and not isinstance(out, BatchQueue):
            raise TypeError("drop_oldest needs a BatchQueue")
        self.drop_oldest = drop_oldest
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._last_warn = 0.0

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        try:
            sock = self._make_socket()
        except BaseException as exc:  # reported to the main thread, which exits cleanly
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        seqs, door = self.seqs, self.door
        # CURVE: each message carries the key it came from; the batch must say the same.
        authenticated = bool(getattr(sock, "authenticated", False))
        budget = RejectBudget(self.rejects_per_s)
        try:
            while not self.stop_event.is_set():
                frames = sock.recv(timeout_ms=self.poll_ms)
                if frames is None:
                    continue
                if self.grants is not None and not self._granted(frames, authenticated):
                    continue
                try:
                    batch = decode(frames, self.spec, seqs)
                    if authenticated:
                        _check_key(batch, frames)
                except DecodeError as exc:
                    self._warn(exc)
                    named = peek_sender(frames)
                    sender = None if named is None else (named, exc.reason.label, None, None)
                    self._refuse(exc.reason.label, sender, budget)
                    continue
                ceiling = door.future_above
                if ceiling is not None and batch.policy_version > ceiling:
                    self._refuse("future_version", _sender(batch, "future_version"), budget)
                    continue
                if self.book is not None:
                    try:  # before the staleness check: a stale batch carries episodes on
                        self.book.verify(batch)
                    except DecodeError as exc:
                        self._warn(exc)
                        self._refuse(exc.reason.label, _sender(batch, exc.reason.label), budget)
                        continue
                floor = door.stale_below
                if floor is not None and batch.policy_version < floor:
                    door.count_stale(batch)
                    self._pause(budget)
                    continue
                if (
                    self.grants is not None
                    and self._held_to_grant(batch.policy_version)
                    and not self.grants.take(batch.actor_id, batch.policy_version)
                ):  # a new version closed the starving learner's extra batch meanwhile
                    self._ungranted(batch.actor_id, batch.num_steps * batch.num_envs)
                    continue
                door.count_received()
                if self.drop_oldest:
                    self._put_newest(batch)
                    continue
                while not self.stop_event.is_set():
                    try:
                        self.out.put(batch, timeout=self.poll_ms / 1000)
                        break
                    except queue.Full:
                        continue
        finally:
            sock.close()

    def _granted(self, frames: list[Any], authenticated: bool) -> bool:
        """False for a hello (recorded) and for a batch beyond its actor's grant (dropped,
        counted); True for everything else, which `decode` then checks. Under CURVE only
        a header whose actor_id is its sender key's counts against a grant or says hello:
        a forger cannot use up an honest actor's grant."""
        assert self.grants is not None
        if len(frames) == 1:
            actor_id = read_hello(frames, self.spec.run_id)
            if actor_id is not None and _sent_by(actor_id, frames, authenticated):
                self.grants.hello(actor_id)
                return False
            return True
        key = batch_key(frames)
        if key is None or not _sent_by(key.actor_id, frames, authenticated):
            return True
        if not self._held_to_grant(key.policy_version):
            return True
        if self.grants.may(key.actor_id, key.policy_version):
            return True
        self._ungranted(key.actor_id, key.env_steps)
        return False

    def _held_to_grant(self, policy_version: int) -> bool:
        """A batch this old is stale whatever its grant (the door's floor is one version of
        slack below the gate's): refused as such, here or by the gate, not as surplus."""
        floor = self.door.stale_below
        return floor is None or policy_version > floor

    def _ungranted(self, actor_id: str, env_steps: int) -> None:
        self.door.count_ungranted(actor_id, env_steps)
        self._pause(self._drops)

    def _put_newest(self, batch: RolloutBatch) -> None:
        """Queue `batch`, dropping one queued batch if full (counted as surplus)."""
        old = self.out.put_evicting(batch)  # type: ignore[attr-defined]
        if old is not None:
            self.door.count_surplus(old)

    def _refuse(self, reason: str, sender: Attributed | None, budget: RejectBudget) -> None:
        """Count one refused message (and its sender, for the ledger); pause if over budget."""
        self.door.refuse(reason, sender)
        self._pause(budget)

    def _pause(self, budget: RejectBudget) -> None:
        pause = budget.spend()
        if pause:
            self.stop_event.wait(pause)

    def _warn(self, exc: DecodeError) -> None:
        now = time.monotonic()
        if now - self._last_warn > 5.0:  # one line per 5 s at most: a flood must not flood logs
            self._last_warn = now
            log.warning("rejected rollout (%s): %s", exc.reason.label, exc.detail)


def _sender(batch: RolloutBatch, reason: str) -> Attributed:
    """A valid batch's refusal for the ledger."""
    return batch.actor_id, reason, batch.sent, batch.seq


def _sent_by(actor_id: str, frames: list[Any], authenticated: bool) -> bool:
    """Whether `actor_id` may be taken as the sender: always without CURVE, else when it is
    the sender key's."""
    if not authenticated:
        return True
    key = sender_key(frames[0])
    return key is not None and actor_id_matches_key(actor_id, key)


def _check_key(batch: RolloutBatch, frames: list[Any]) -> None:
    """Under CURVE: refuse a batch whose actor_id is not its sender key's
    (ppomq.core.transport.curvezmq)."""
    key = sender_key(frames[0])
    if key is None or not actor_id_matches_key(batch.actor_id, key):
        raise DecodeError(
            Reason.ACTOR_ID_NOT_KEY, f"actor_id {batch.actor_id!r} is not key {key}'s"
        )
