"""Long-poll requests waiting for a newer version, each until its deadline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ppomq.proto import weights_rpc as protocol


@dataclass(slots=True)
class Parked:
    envelope: list[bytes]
    request: protocol.Request
    deadline: float


class ParkedRequests:
    """At most `limit` parked requests; the server takes out those it can answer."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: list[Parked] = []

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def has_room(self) -> bool:
        return len(self._waiting) < self.limit

    def park(self, envelope: list[bytes], request: protocol.Request, deadline: float) -> None:
        self._waiting.append(Parked(envelope, request, deadline))

    def take_answerable(self, held_version: int | None, *, finished: bool) -> list[Parked]:
        """Those that `held_version` is newer for, or all of them once the run has finished
        (the answer then says so)."""
        if finished:
            return self.take_all()
        if held_version is None:
            return []
        return self._take(lambda parked: held_version > parked.request.have)

    def take_expired(self, now: float) -> list[Parked]:
        return self._take(lambda parked: parked.deadline <= now)

    def take_all(self) -> list[Parked]:
        taken, self._waiting = self._waiting, []
        return taken

    def seconds_to_soonest(self, now: float) -> float | None:
        """Until the first deadline (0 if one has passed); None when nothing is parked."""
        if not self._waiting:
            return None
        return max(min(p.deadline for p in self._waiting) - now, 0.0)

    def _take(self, due: Callable[[Parked], bool]) -> list[Parked]:
        taken = [parked for parked in self._waiting if due(parked)]
        if taken:
            self._waiting = [parked for parked in self._waiting if not due(parked)]
        return taken
