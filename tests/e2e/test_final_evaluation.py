"""The final evaluation of a `ppomq train` run, however long it takes: waited for and said
on the console, never reported as a learner that hangs; and a stop signal during it is a
stop signal (the exit code says so, the summary is written). The env is one whose steps
take as long as an emulator's (tests.support.slow_env), so that the evaluation takes
seconds per episode on any machine, as Pong's does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

import psutil
import pytest

from ppomq.core.events import read_events
from ppomq.launch.evaluation import EVAL_SILENT_S
from ppomq.launch.supervisor import DEADLINE_GRACE_S
from tests.support import wait_until
from tests.support.slow_env import SLOW_ENV

from .cli import PPOMQ
from .cli import clean_env as _env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# One update of 256 steps; then about a second per evaluation episode (200 slow steps).
TINY = ["--env-id", SLOW_ENV, "--total-steps", "256", "--num-envs", "4", "--num-steps", "32",
        "--batch-samples", "256", "--update-epochs", "1", "--no-progress"]  # fmt: skip


def _evaluation_span(run_dir) -> float:
    """Seconds the learner took from its final weights (written just before the
    evaluation) to its summary (just after)."""
    weights = (run_dir / "final_weights.pt").stat().st_mtime
    return (run_dir / "summary.json").stat().st_mtime - weights


def _evaluating(run_dir) -> bool:
    """The learner evaluates: its final weights are written, its summary not yet."""
    return (run_dir / "final_weights.pt").exists() and not (run_dir / "summary.json").exists()


def test_an_evaluation_longer_than_the_launchers_grace_is_waited_for_not_called_a_hang(
    tmp_path,
):
    """The launcher used to give the learner DEADLINE_GRACE_S past --total-steps, then
    print "the learner did not stop; stopping" and stop it in the middle of its evaluation."""
    run_dir = tmp_path / "run"
    episodes = int(DEADLINE_GRACE_S * 1.3)
    out = subprocess.run(
        [*PPOMQ, "train", *TINY, "--eval-episodes", str(episodes), "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=240, env=_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "did not stop" not in out.stdout and "stopping" not in out.stdout, out.stdout
    assert _evaluation_span(run_dir) > DEADLINE_GRACE_S  # what makes the test
    assert f"final evaluation: {episodes} greedy episodes of {SLOW_ENV}" in out.stdout
    events = read_events(run_dir / "events.jsonl")
    said = [e for e in events if e["event"] == "learner.evaluate"]
    assert said[0]["done"] == 0 and said[-1]["episodes"] == episodes and len(said) > 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_eval_return"] is not None


class _Train:
    """`ppomq train` from a terminal of its own, its output read as it comes."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [*PPOMQ, "train", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=_env(), start_new_session=True,
            # As from a terminal: a suite started in the background hands its children
            # SIGINT ignored.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def send(self, sig: int) -> None:
        if sig == signal.SIGINT:
            os.killpg(self.proc.pid, sig)  # what a terminal's Ctrl-C does: the whole group
        else:
            self.proc.send_signal(sig)  # `kill PID`, a scheduler's stop

    def finish(self) -> int:
        try:
            code = self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.reader.join(timeout=10)
        return code


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_during_the_final_evaluation_exits_128_plus_it_with_the_summary(
    tmp_path, sig
):
    """Ctrl-C while the learner evaluated used to exit 0 (the learner, past its run's end,
    exits 0): a run stopped by hand read as done. The warm stop lets the evaluation end."""
    run_dir = tmp_path / "run"
    run = _Train([*TINY, "--eval-episodes", "6", "--run-dir", str(run_dir)])
    try:
        wait_until(lambda: _evaluating(run_dir), 120, "the evaluation to start")
        run.send(sig)
    finally:
        code = run.finish()
    assert code == 128 + sig, run.output
    assert "final evaluation: 6 greedy episodes" in run.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_eval_return"] is not None  # evaluated to the end all the same
    assert "Traceback" not in run.output


def test_a_second_ctrl_c_skips_the_final_evaluation_and_still_writes_the_summary(tmp_path):
    run_dir = tmp_path / "run"
    run = _Train([*TINY, "--eval-episodes", "100", "--run-dir", str(run_dir)])
    try:
        wait_until(lambda: "final evaluation:" in run.output, 120, "the evaluation to start")
        assert "Ctrl-C twice skips it" in run.output
        run.send(signal.SIGINT)
        learner_log = run_dir / "logs" / "learner.log"
        wait_until(lambda: "received: finishing" in learner_log.read_text(), 60,
                   "the learner's warm stop")  # fmt: skip
        run.send(signal.SIGINT)
    finally:
        code = run.finish()
    assert code == 128 + signal.SIGINT, run.output
    assert "final evaluation skipped" in learner_log.read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_eval_return"] is None
    assert "final eval return: not run" in run.output


def test_an_evaluation_that_stops_saying_it_goes_on_is_a_hang_and_ends_the_run(tmp_path):
    """Waiting as long as the evaluation goes on must not wait forever for a learner that
    hangs: frozen mid-evaluation (SIGSTOP), it is called a hang after EVAL_SILENT_S."""
    run_dir = tmp_path / "run"
    run = _Train([*TINY, "--eval-episodes", "1000", "--run-dir", str(run_dir)])
    try:
        wait_until(lambda: "final evaluation:" in run.output, 120, "the evaluation to start")
        learner = next(
            p for p in psutil.Process(run.proc.pid).children(recursive=True)
            if "ppomq.cli learner" in " ".join(p.cmdline())  # the zygote retitles its children
        )  # fmt: skip
        learner.suspend()  # SIGSTOP: a learner that hangs
    finally:
        code = run.finish()
    assert code == 1, run.output
    assert f"final evaluation said nothing for {EVAL_SILENT_S:.0f} s (it hangs)" in run.output
    assert not learner.is_running() or learner.status() == psutil.STATUS_ZOMBIE


def test_the_evaluation_ends_at_its_time_bound_and_its_time_is_not_trainings(tmp_path):
    """A greedy evaluation as long as Pong's (71 s with no bound, no progress) ends at
    --eval-timeout-s, says so, and the done line's time and SPS are training's."""
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [*PPOMQ, "train", *TINY, "--eval-episodes", "1000", "--eval-timeout-s", "4",
         # Shorter than the evaluation: its time would read as the actors' silence.
         "--actor-timeout-s", "1", "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=240, env=_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "at most 4 s (--eval-episodes, --eval-timeout-s" in out.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    ev = summary["final_eval"]
    assert ev["cut_short"] and ev["episodes_asked"] == 1000 and ev["episodes"] < 1000
    assert 4.0 <= ev["seconds"] < 4.0 + 10.0
    assert f"over {ev['episodes']} of 1000 greedy episodes (the time bound" in out.stdout
    # Training's wall time ends where the evaluation begins (final weights written).
    weights_at = (run_dir / "final_weights.pt").stat().st_mtime
    assert summary["started_unix"] + summary["wall_seconds"] <= weights_at + 0.5
    learner_log = (run_dir / "logs" / "learner.log").read_text()
    assert "silent for" not in learner_log  # the learner was busy, not its actors quiet
