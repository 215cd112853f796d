"""The door: what the receiving thread and the training thread share, under one lock.

The training thread sets the version bounds the door enforces (`set_bounds`); the
receiving thread counts what it refuses there and who sent it (`refuse`, `count_stale`,
`count_surplus`); the training thread takes that tally between updates (`take`) into the
rollout ledger and the run's counts. Neither thread reaches into the other's objects.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from ppomq.proto import RolloutBatch

# Refused messages whose header names a sender, kept for the ledger until the training
# thread takes them (between updates, at least every COUNTS_EVERY_S); beyond this many, a
# flood's are counted unattributed.
MAX_ATTRIBUTED = 4096

# A refusal the ledger puts under an actor: (actor_id, reason, sent, seq).
Attributed = tuple[str, str, int | None, int | None]


@dataclass
class DoorTally:
    """What the door saw since the last `take`, except `rejects`: its running totals."""

    # Valid batches the door refused as stale or dropped as surplus: received, discarded.
    discarded_batches: int = 0
    discarded_env_steps: int = 0
    attributed: list[Attributed] = field(default_factory=list)
    unattributed: Counter[str] = field(default_factory=Counter)
    rejects: dict[str, int] = field(default_factory=dict)


class Door:
    """The bounds a batch's policy version must meet at the door, and the door's tally."""

    def __init__(self, max_attributed: int = MAX_ATTRIBUTED) -> None:
        self._lock = threading.Lock()
        self.max_attributed = max_attributed
        # A batch of an older version than `stale_below` is refused as stale: at most the
        # training thread's own bound, which only rises, so the door never refuses what it
        # would train on. One above `future_above` cannot be honest: no actor had those
        # weights. None: no bound yet.
        self.stale_below: int | None = None
        self.future_above: int | None = None
        self._received = 0
        self._rejects: Counter[str] = Counter()
        self._pending = DoorTally()

    def set_bounds(self, *, stale_below: int, future_above: int) -> None:
        with self._lock:
            self.stale_below, self.future_above = stale_below, future_above

    # The receiving thread's side.
    def count_received(self) -> None:
        with self._lock:
            self._received += 1

    def refuse(self, reason: str, sender: Attributed | None) -> None:
        """One refused message, by reason, and its sender for the ledger when it named one
        (`sent` and `seq` only from valid batches: an invalid message's figures are not
        taken)."""
        with self._lock:
            self._rejects[reason] += 1
            if sender is None:
                self._pending.unattributed[reason] += 1
            else:
                self._attribute(sender)

    def count_stale(self, batch: RolloutBatch) -> None:
        """A valid batch refused as stale: received and discarded, and refused."""
        self._discard(batch)
        self.refuse("stale", (batch.actor_id, "stale", batch.sent, batch.seq))

    def count_surplus(self, batch: RolloutBatch) -> None:
        """A valid batch dropped from a full queue for a newer one: discarded, not refused."""
        self._discard(batch)
        with self._lock:
            self._attribute((batch.actor_id, "surplus", batch.sent, batch.seq))

    def count_ungranted(self, actor_id: str, env_steps: int) -> None:
        """A batch beyond its actor's grant, dropped before its decode: discarded (its env
        steps as its header claims them) and attributed as surplus, not refused."""
        with self._lock:
            self._pending.discarded_batches += 1
            self._pending.discarded_env_steps += env_steps
            self._attribute((actor_id, "surplus", None, None))

    def _discard(self, batch: RolloutBatch) -> None:
        with self._lock:
            self._pending.discarded_batches += 1
            self._pending.discarded_env_steps += batch.num_steps * batch.num_envs

    def _attribute(self, entry: Attributed) -> None:
        pending = self._pending
        if len(pending.attributed) < self.max_attributed:
            pending.attributed.append(entry)
        else:  # only a flood gets here
            pending.unattributed[entry[1]] += 1

    # The training thread's side.
    def take(self) -> DoorTally:
        """The tally since the last call, with the running reject totals."""
        with self._lock:
            taken, self._pending = self._pending, DoorTally()
            taken.rejects = dict(self._rejects)
        return taken

    def snapshot(self) -> tuple[int, dict[str, int]]:
        """(valid batches passed on, rejects by reason) since the door opened."""
        with self._lock:
            return self._received, dict(self._rejects)
