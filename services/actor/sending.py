"""Handing a batch to the learner: wait for room in slices, saying so now and then."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ppomq.core.transport.rollouts import RolloutSender

log = logging.getLogger("ppomq.actor")

# The wait for room runs in slices this long, checking between them whether to give up: a
# signal's handler runs during such a wait but cannot end it, and at a run's end (the
# learner finished, so no room will come) an actor must notice its SIGTERM at once. A
# stopping actor so gives its last batch one slice to leave.
SEND_SLICE_MS = 50
# An actor whose batch no learner takes says so this often (it goes on waiting).
SEND_WAIT_LOG_S = 30.0


def send_until_taken(
    sender: RolloutSender,
    frames: list[Any],
    *,
    give_up: Callable[[], bool],
    beat: Callable[[], None],
    actor_id: str,
) -> bool:
    """Send `frames`, waiting as long as it takes for a learner to take them; False when
    `give_up()` said to stop waiting first. Calls `beat` in every slice: waiting for a
    learner that is away is the actor alive, and restarting it would not help."""
    since = last_said = time.monotonic()
    while not sender.send(frames, timeout_ms=SEND_SLICE_MS):
        beat()
        if time.monotonic() - last_said >= SEND_WAIT_LOG_S:
            last_said = time.monotonic()
            log.warning("actor %s: the learner at %s has taken no batch for %.0f s; "
                        "waiting (a learner restarting, or the run is over and its "
                        "weightserver gone: stop this actor)", actor_id,
                        sender.endpoint, last_said - since)  # fmt: skip
        if give_up():
            return False
    return True
