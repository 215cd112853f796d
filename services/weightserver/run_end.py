"""Who must hear that the run has ended before the weightserver exits.

Once its run is marked finished, a weightserver answers every request at once, saying so
(actors then exit 0), then exits 0 itself: as soon as every client that asked within
CLIENT_ACTIVE_S before the end has been told, at most FINISH_GRACE_S after it. Each actor
asks at least every long poll (0.5 s), so the grace leaves one that is busy several chances.
"""

from __future__ import annotations

import logging

log = logging.getLogger("ppomq.weightserver")

FINISH_GRACE_S = 5.0
CLIENT_ACTIVE_S = 10.0


class RunEndRollCall:
    """When each client (a ROUTER identity) last asked for weights and, at the run's end,
    the ones still to be told: every actor, those added by hand included, must hear it.

    At most `limit` clients are remembered; past that the longest quiet is forgotten.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._last_asked: dict[bytes, float] = {}
        self._untold: set[bytes] | None = None

    def asked(self, client: bytes, now: float) -> None:
        self._last_asked[client] = now
        if len(self._last_asked) > self.limit:
            quietest = min(self._last_asked, key=self._last_asked.__getitem__)
            del self._last_asked[quietest]

    def told(self, client: bytes, finished_at: float) -> None:
        self.untold(finished_at).discard(client)

    def untold(self, finished_at: float) -> set[bytes]:
        """Clients active before the end that have not been told it yet (fixed when first
        asked for: only clients that asked within CLIENT_ACTIVE_S before the end)."""
        if self._untold is None:
            self._untold = {
                client
                for client, at in self._last_asked.items()
                if finished_at - at <= CLIENT_ACTIVE_S
            }
        return self._untold

    def everyone_told(self, finished_at: float, now: float) -> bool:
        """Whether every client active before the end has heard it, or the grace is over."""
        untold = self.untold(finished_at)
        if now - finished_at >= FINISH_GRACE_S:
            if untold:
                log.info("%d client(s) did not ask again within %.0f s of the end",
                         len(untold), FINISH_GRACE_S)  # fmt: skip
            return True
        return not untold
