"""The actor's weights: fetched and loaded in a background thread, swapped in between rollouts.

Asking the weightserver between rollouts would cost the actor's step loop a round trip per
batch even when nothing is new, plus the load into torch (benchmarks/actor_efficiency.py
measures both). Here one thread keeps a long poll open — the weightserver answers it the
moment a newer version is published — and loads the weights into a fresh `InferencePolicy`;
the step loop only picks up the newest one (`refresh_weights`), which costs a lock and a
comparison.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ppomq.core.models import InferencePolicy, Policy, build_model, load_numpy_state
from ppomq.core.signals import WarmStop
from ppomq.core.transport.curvezmq import last_client_failure
from ppomq.core.transport.weights_client import WeightsClient, WeightsTimeoutError
from ppomq.proto import WeightsHeader, unpack_tensors

log = logging.getLogger("ppomq.actor")

# The step loop's waits for weights run in slices this long, checking for a stop between
# them: a signal's handler runs during such a wait but cannot end it, and an actor waiting
# for weights that will never come (the learner has finished) must notice its SIGTERM at
# once.
STOP_POLL_S = 0.02
# A wait for weights this long says so once, with the CURVE handshake's cause if any.
WAIT_WARN_S = 10.0


class Stopped(Exception):
    """Asked to stop while waiting for weights."""


class RunFinished(Exception):
    """The weightserver says the run has finished: no newer weights will come."""


class PolicyHolder:
    """A policy rebuilt from weights messages, the version it came from, and the header's
    `actor` map (what the actor applies outside the network, proto/WEIGHTS.md)."""

    def __init__(self) -> None:
        self.policy: Policy | None = None
        self.inference: InferencePolicy | None = None
        self.version = -1
        self.actor: dict[str, Any] = {}

    def load(self, header: WeightsHeader, blob: Any) -> None:
        if self.policy is None or self.policy.spec != header.model:
            self.policy = build_model(header.model)
        load_numpy_state(self.policy, unpack_tensors(header, blob))
        # InferencePolicy copies the tensors, so a later load never changes a policy that
        # the step loop is using.
        self.inference = self.policy.inference()
        self.version = header.version
        self.actor = dict(header.actor)


class WeightsPrefetcher:
    """Keeps the newest weights loaded, from a background thread that owns `client`."""

    def __init__(self, client: WeightsClient, *, long_poll_ms: int = 500) -> None:
        self._client = client  # a zmq socket: used by the thread only from here on
        self._long_poll_ms = long_poll_ms
        self._holder = PolicyHolder()
        self._ready: tuple[int, InferencePolicy, dict[str, Any]] | None = None
        self._error: BaseException | None = None
        self._finished = False
        self._changed = threading.Condition()
        self._stop = threading.Event()
        # Held while the thread is inside torch. Python ends a daemon thread that wakes during
        # interpreter shutdown with pthread_exit, and that unwinding through torch's C++ frames
        # aborts the process ("terminate called without an active exception", exit -6), so
        # close() takes this lock: once it has, the thread never enters torch again.
        self._loading = threading.Lock()
        self.timeouts = 0
        self._thread = threading.Thread(target=self._run, name="weights-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    got = self._client.get_newer(self._holder.version, wait_ms=self._long_poll_ms)
                except WeightsTimeoutError:
                    self.timeouts += 1  # weightserver slow or away: the client reconnects
                    continue
                if got is not None:
                    with self._loading:
                        if self._stop.is_set():
                            return
                        self._holder.load(*got)
                    assert self._holder.inference is not None
                    with self._changed:
                        holder = self._holder
                        self._ready = (holder.version, holder.inference, holder.actor)
                        self._changed.notify_all()
                if self._client.run_finished and got is None:
                    # The run has ended: no newer weights will come, and the weightserver
                    # answers at once from now on; stop asking.
                    with self._changed:
                        self._finished = True
                        self._changed.notify_all()
                    return
        except BaseException as exc:  # handed to the step loop, which raises it
            with self._changed:
                self._error = exc
                self._changed.notify_all()
        finally:
            self._client.close()

    def newest(
        self, newer_than: int, *, timeout_s: float = 0.0
    ) -> tuple[int, InferencePolicy, dict[str, Any]] | None:
        """(version, policy, actor map) of the newest weights if newer than `newer_than`,
        waiting up to `timeout_s` for them; None if there are none yet. Re-raises the
        thread's error."""

        def ready() -> bool:
            return (
                self._error is not None
                or self._finished
                or (self._ready is not None and self._ready[0] > newer_than)
            )

        with self._changed:
            if timeout_s > 0:
                self._changed.wait_for(ready, timeout_s)
            if self._error is not None:
                raise self._error
            if self._ready is not None and self._ready[0] > newer_than:
                return self._ready
            return None

    @property
    def finished(self) -> bool:
        """The weightserver said the run has finished and we hold its newest weights."""
        return self._finished

    def close(self, timeout_s: float = 0.01) -> None:
        """Stop the thread; wait for it at most `timeout_s`.

        The thread notices the stop at its next answer: within one long poll when the
        weightserver is there, only after the client's timeout (seconds) when it is not,
        and at a run's end `ppomq train` stops the weightserver together with the actors.
        Waiting that out would hold up every actor's exit. The thread is a daemon and its
        socket has LINGER 0, so leaving it in its poll to end with the process loses nothing;
        a load in progress (one load, short) is waited for, see `_loading`.
        """
        with self._loading:
            self._stop.set()
        self._thread.join(timeout=timeout_s)


def refresh_weights(
    weights: WeightsPrefetcher,
    version: int,
    stop: WarmStop,
    *,
    need_new: bool,
    resend_after_s: float | None = None,
    beat: Callable[[], None] = lambda: None,
) -> tuple[int, InferencePolicy, dict[str, Any]] | None:
    """The newest loaded (version, policy, actor map) if newer than `version`, else None;
    blocks until there is a newer one when we hold none (`version` -1) or `need_new`.
    A `need_new` wait ends with None after `resend_after_s`: the learner may have lost our
    last batch (it restarted, or the network dropped it) and be waiting for one.
    Raises `Stopped` when asked to stop while waiting, `RunFinished` when the run has
    finished (the weightserver said so) and nothing newer will come. Calls `beat` in every
    slice of its wait: waiting for weights is the main loop turning, not a hang."""
    must_wait = need_new or version < 0
    waited_since = time.monotonic()
    warned = False
    while True:
        got = weights.newest(version, timeout_s=STOP_POLL_S if must_wait else 0.0)
        beat()
        if got is not None or not must_wait:
            return got
        if stop.requested:
            raise Stopped
        if weights.finished:
            raise RunFinished
        waited = time.monotonic() - waited_since
        if version >= 0 and resend_after_s is not None and waited > resend_after_s:
            log.info("no version newer than v%d for %.0f s: sending another batch with it",
                     version, waited)  # fmt: skip
            return None
        if not warned and waited > WAIT_WARN_S:
            warned = True
            # A refused key looks like a silent weightserver: say the handshake's cause too.
            cause = last_client_failure()
            log.warning("still waiting for weights newer than v%d from the weightserver%s",
                        version, f"; {cause}" if cause else "")  # fmt: skip
