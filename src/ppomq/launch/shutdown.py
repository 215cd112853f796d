"""Stopping a local run: the warm stop (learner first, then the rest, then Redis), hurried
by a second stop signal and cut short by a third."""

from __future__ import annotations

import atexit
import gc
import signal
import time
from typing import TYPE_CHECKING, Any

from ppomq.core.timeline import Timeline
from ppomq.launch import zygote
from ppomq.launch.child import Child
from ppomq.launch.evaluation import EVAL_SILENT_S, EvaluationWatch
from ppomq.launch.messages import note

if TYPE_CHECKING:
    from pathlib import Path

    from ppomq.core.store.embedded import EmbeddedRedis
    from ppomq.launch.learning_curve import CurvePainter
    from ppomq.launch.supervisor import Launcher

STOP_GRACE_S = 20.0
# What a stopping learner gets to end its update and write its checkpoint; its final
# evaluation then has as long as it says it goes on (ppomq.launch.evaluation).
LEARNER_STOP_S = STOP_GRACE_S + 60
# A second Ctrl-C/SIGTERM: the learner gets its second signal (a fast stop that still
# writes the checkpoint and summary) and every wait is cut to this; a third: kill now.
HURRY_GRACE_S = 15.0
# The learning curve, drawn once the learner has exited (ppomq.launch.learning_curve).
CURVE_WAIT_S = 30.0


class Terminated(Exception):
    """SIGTERM to `ppomq train`: stop like Ctrl-C does."""


class Shutdown:
    """Launcher's stop path (a mixin: the state it reads is set up by Launcher.__init__)."""

    children: list[Child]
    learner: Child | None
    redis: EmbeddedRedis | None
    stopping: bool
    hurry_deadline: float
    hurry_noted: bool
    learner_signalled: bool
    learner_finished: bool
    members: list[Child]
    evaluation: EvaluationWatch | None
    painter: CurvePainter | None
    run_dir: Path
    start_time_unix: float
    s: Any

    def hurry(self, *, now: bool = False) -> None:
        """A second stop signal: the learner gets its second SIGTERM (a fast stop that still
        writes its checkpoint and summary) and stop()'s waits end within HURRY_GRACE_S; a
        third (`now`): they end at once and what is left is killed. Signal-handler safe."""
        self.hurry_deadline = min(
            self.hurry_deadline, time.monotonic() + (0.0 if now else HURRY_GRACE_S)
        )
        if self.learner is not None and self.learner_signalled:
            self.learner.terminate()
            for member in self.members:
                member.terminate()

    def _wait(self, child: Child, timeout: float) -> None:
        """child.wait(timeout), cut short by hurry(); what is still running then is killed."""
        self._await_exits([child], timeout)
        child.wait(0)

    def _await_exits(self, children: list[Child], timeout: float) -> None:
        """Wait until every child has exited by itself, at most `timeout` (cut short by
        hurry()); kills nothing."""
        end = time.monotonic() + timeout
        for child in children:
            while child.proc is not None and child.proc.exitcode is None:
                if self.hurry_deadline < float("inf") and not self.hurry_noted:
                    self.hurry_noted = True  # printed here, not in the signal handler
                    note("stopping faster (a third Ctrl-C kills what is left)...")
                left = min(end, self.hurry_deadline) - time.monotonic()
                if left <= 0:
                    return
                child.proc.join(min(left, 0.1))

    def evaluating(self) -> bool:
        """Whether the learner's final evaluation runs and says it goes on; its start is
        said on the console, with how to skip it."""
        watch = self.evaluation
        if watch is None:
            return False
        if watch.poll() and self.hurry_deadline == float("inf"):
            # Its first stop signal lets the learner evaluate (a warm stop); the next skips it.
            skip = "Ctrl-C skips it" if self.learner_signalled else "Ctrl-C twice skips it"
            episodes = f"{watch.episodes} greedy episode{'s' if watch.episodes != 1 else ''}"
            bound = f", at most {watch.limit_s:g} s" if watch.limit_s > 0 else ""
            note(f"final evaluation: {episodes} of {self.s.env_id}{bound} (--eval-episodes, "
                 f"--eval-timeout-s; {skip})...")  # fmt: skip
        return watch.running and not watch.stalled()

    def _wait_learner(self) -> None:
        """Wait for the learner to exit: LEARNER_STOP_S, and while its final evaluation
        goes on, until STOP_GRACE_S after it; cut short by hurry() or an evaluation that
        hangs. What is still running then is killed."""
        learner = self.learner
        assert learner is not None
        end = time.monotonic() + LEARNER_STOP_S
        while learner.proc is not None and learner.proc.exitcode is None:
            self._await_exits([learner], 0.25)
            now = time.monotonic()
            if now >= self.hurry_deadline:
                break
            if self.evaluating():
                end = max(end, now + STOP_GRACE_S)  # then its summary, the finished marker
                continue
            if self.evaluation is not None and self.evaluation.stalled():
                note(f"the learner's final evaluation has said nothing for "
                     f"{EVAL_SILENT_S:.0f} s (it hangs); killing it")  # fmt: skip
                break
            if now >= end:
                note(f"the learner did not stop in time; killing it (see {learner.log_path})")
                break
        if learner.wait(0) == 0:
            self.learner_finished = True  # its run had reached its end after all

    def stop(self) -> None:
        """Learner first (warm stop: it finishes the update, checkpoints, writes the
        summary), then the actors and the weightserver, then Redis."""
        self.stopping = True
        timeline: Timeline | None = getattr(self, "timeline", None)
        mark = timeline.mark if timeline is not None else (lambda _phase: None)
        mark("stop")
        # The learner ended the run itself (exit 0 before any signal of ours): the
        # weightserver then tells every actor that asks, those added by hand included, and
        # exits by itself once they have heard; stopping it now would leave those waiting.
        finished = (
            self.learner is not None
            and self.learner.proc is not None
            and self.learner.proc.exitcode == 0
        )
        if self.learner is not None:
            # A learner group's ranks all at once: they stop together, at the same update.
            for rank in (self.learner, *self.members):
                rank.terminate()
            self.learner_signalled = True
            if self.hurry_deadline < float("inf"):
                self.learner.terminate()  # the second Ctrl-C came before the first reached it
            self._wait_learner()  # its final evaluation runs in it
            if timeline is not None:
                timeline.mark_exit("learner exited", self.learner.proc)
        if self.painter is not None:  # drawn while the other services stop
            self.painter.draw_for(self.run_dir, self.start_time_unix)
        if timeline is not None:  # each exit marked as it happens: who holds the stop up
            for child in self.children:
                timeline.watch_exit(f"{child.name} exited", child.proc)
        if finished:
            # Our own actors hear the end the way actors added by hand do, from the
            # weightserver's answer, and exit 0; the weightserver exits once everyone that
            # was active has heard. Signalling our actors instead would leave them untold,
            # and it would then wait out its whole grace for them on every finished run.
            from ppomq.weightserver.run_end import FINISH_GRACE_S

            self._await_exits(self.children, FINISH_GRACE_S + 1.0)
        for child in self.children:
            child.terminate()  # what has not exited by itself (a no-op for what has)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            self._wait(child, deadline - time.monotonic())
        mark("children exited")
        zygote.stop_server()
        mark("zygote stopped")
        if self.redis is not None:
            self.redis.close()
            mark("redis stopped")
        if self.painter is not None:
            deadline = min(time.monotonic() + CURVE_WAIT_S, self.hurry_deadline)
            if self.painter.finish(deadline) is not None:
                mark("learning curve drawn")
        if timeline is not None:
            timeline.finish(self.run_dir)
            timeline.events.close()
        self.run_lock.release()  # everything that writes the run dir has stopped
        # At exit Python's last garbage collections walk every object this process holds
        # (pydantic, gymnasium, numpy, redis...): a good share of `ppomq train`'s time from
        # the last update to the prompt. Frozen, they are skipped. At exit only, so a Launcher
        # used inside another program changes nothing there.
        atexit.register(gc.freeze)


class StopSignals:
    """Ctrl-C and SIGTERM for `ppomq train`: the first raises in the main thread (supervise
    ends, stop() runs: the warm stop); each later one, or any once stop() has begun, only
    hurries that stop (Launcher.hurry), so the cleanup itself is never cut short: children
    stopped, fork server stopped, Redis stopped (its data flushed to the run dir)."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.count = 0
        self.signum: int | None = None  # the first stop signal: the exit code is 128 + it
        self.finished_first = False  # the learner had finished when the first one came

    def exit_code(self) -> int:
        """`ppomq train`'s exit code once a stop signal came: 0 if the run had finished
        before it (the learner exited 0: evaluated, summary written; the signal only
        hurried the rest of the stop), else 128 + the signal (130 for Ctrl-C, 143 for
        SIGTERM), what a shell reports for a command a signal ended, so that `ppomq train
        && ppomq eval` or a scheduler does not take it for done. A signal during the
        learner's final evaluation is no exception: it came before the run's end."""
        if self.finished_first or self.signum is None:
            return 0
        return 128 + self.signum

    def install(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: Any) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
            self.finished_first = self.launcher.learner_finished
        if self.count == 1 and not self.launcher.stopping:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated
        self.launcher.hurry(now=self.count >= 3)
