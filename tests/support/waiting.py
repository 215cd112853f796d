"""One way for a test to wait: poll a condition until it holds, or fail saying what never
happened.

The timeout is a liveness deadline (a hung system fails instead of hanging the suite),
never a timing claim: nothing asserts how long the wait took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL_S = 0.05


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    check: Callable[[], object] | None = None,
    not_yet: tuple[type[Exception], ...] = (),
    context: Callable[[], object] | None = None,
    interval_s: float = POLL_INTERVAL_S,
) -> T:
    """Poll `predicate` until it returns something truthy, and return that.

    `check` runs before each poll and raises when waiting is pointless (a process the
    condition needs has exited), so a crash fails at once, with its own message. An
    exception of a type in `not_yet` raised by `predicate` counts as "not yet" (a server
    that is restarting); the last one is named if time runs out. `context` is called on
    timeout only, for what helps tell why (logs, stats).
    """
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        if check is not None:
            check()
        try:
            got = predicate()
        except not_yet as exc:
            last_error = exc
        else:
            if got:
                return got
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    message = f"timed out after {timeout_s:g} s waiting for {what}"
    if last_error is not None:
        message += f" (last error: {last_error!r})"
    if context is not None:
        message += f"\n{context()}"
    raise AssertionError(message)
