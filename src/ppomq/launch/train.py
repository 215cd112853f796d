"""`ppomq train`: start a local run, show its progress, stop it, print its summary."""

from __future__ import annotations

import csv
import json
import signal
from pathlib import Path

from ppomq.core.errors import UserError
from ppomq.core.rundir import CHECKPOINT_FILE, FINISHED_FILE
from ppomq.core.settings import TrainSettings
from ppomq.launch.dataplane import describe_data_plane
from ppomq.launch.messages import note
from ppomq.launch.progress import Progress, summary_text
from ppomq.launch.shutdown import StopSignals, Terminated
from ppomq.launch.supervisor import Launcher


def _end_already_reached(settings: TrainSettings, run_dir: Path) -> dict | None:
    """The finished run's summary when --total-steps is one it has already reached."""
    if not settings.total_steps or not (run_dir / FINISHED_FILE).exists():
        return None
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        reached = int(summary["total_env_steps"]) >= settings.total_steps
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no readable summary: the learner decides
    return summary if reached else None


def resume_line(run_dir: Path) -> str | None:
    """What the console says when the run dir holds a run to go on with (a checkpoint):
    from which version and env steps, as its last progress row says."""
    if not (run_dir / CHECKPOINT_FILE).exists():
        return None
    try:
        with open(run_dir / "progress.csv", newline="") as fh:
            last = list(csv.DictReader(fh))[-1]
        where = f" from version {int(last['version'])} ({int(last['env_steps']):,} env steps)"
    except (OSError, ValueError, KeyError, IndexError):
        where = ""  # no rows yet: the checkpoint alone says where
    return f"resuming the run in {run_dir}{where}; pass another --run-dir for a new run"


def run_train(settings: TrainSettings) -> int:
    """Train to the run's end; the exit code: 0 once the run finished (or had already),
    128 + the signal when Ctrl-C (130) or SIGTERM (143) stopped it before that, else the
    failure's own (1 crashes, 2 usage, 4 Redis)."""
    data_plane = describe_data_plane(settings)  # one-line error before anything starts
    launcher = Launcher(settings)
    try:
        return _run(launcher, settings, data_plane)
    except UserError:
        launcher.discard_if_unused()  # a failed start leaves no run dir behind
        raise


def _run(launcher: Launcher, settings: TrainSettings, data_plane: str) -> int:
    print(
        f"ppomq train: {settings.env_id}, {settings.mode} mode, {settings.actors} actor(s); "
        f"run dir {launcher.run_dir}; {data_plane}",
        flush=True,
    )
    done = _end_already_reached(settings, launcher.run_dir)
    if done is not None:  # the same command again: start nothing, change nothing
        print(
            f"the run already reached its end ({done['total_env_steps']:,} env steps of "
            f"--total-steps {settings.total_steps:,}): nothing to train; raise --total-steps "
            "to go on with it",
            flush=True,
        )
        print(summary_text(done, launcher.run_dir), flush=True)
        return 0
    resuming = resume_line(launcher.run_dir)
    if resuming is not None:
        print(resuming, flush=True)
    interrupted = False
    code = 1
    progress: Progress | None = None
    signals = StopSignals(launcher).install()
    try:
        launcher.start()
        progress = Progress(launcher) if settings.progress else None
        code = launcher.supervise(progress)
    except (KeyboardInterrupt, Terminated):
        interrupted = True
        print("\nstopping (Ctrl-C again to stop faster)...", flush=True)
    finally:
        if progress is not None:
            progress.close()  # the live line ends; what follows goes below it
        launcher.stop()
        # Everything is stopped: a late Ctrl-C (the second of two quick ones) has nothing
        # left to do. Ignored, not handled: the interpreter puts Python-handled signals back
        # to their defaults as it exits, and one landing then would end us with -SIGINT.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    summary_path = launcher.run_dir / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        print(summary_text(summary, launcher.run_dir), flush=True)
    if launcher.failure is not None:
        raise launcher.failure
    if interrupted:
        # The learner exits 0 only once its run is finished (ppomq.core.signals), also when
        # the stop signal came during its last update: then the run is done all the same.
        learner = launcher.learner
        finished = learner is not None and learner.poll() == 0
        if not summary_path.exists():
            note(f"stopped before the learner wrote a summary; see {launcher.run_dir / 'logs'}")
        return signals.exit_code(finished=finished)
    if summary_path.exists():
        return code
    raise UserError(
        f"the learner exited with {code} before writing a summary; "
        f"see {launcher.run_dir / 'logs' / 'learner.log'}"
    )
