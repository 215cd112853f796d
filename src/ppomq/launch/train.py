"""`ppomq train`: start a local run, show its progress, stop it, print its summary."""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from ppomq.core.errors import UserError
from ppomq.core.rundir import CHECKPOINT_FILE, FINISHED_FILE
from ppomq.core.settings import AUTO, NO_PRESET, TrainSettings, auto_preset
from ppomq.launch.dataplane import describe_data_plane
from ppomq.launch.messages import note
from ppomq.launch.progress import Progress, summary_text
from ppomq.launch.run_size import run_dir_size_line
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


def resume_command(argv: Sequence[str], run_dir: Path) -> str:
    """The command that goes on with the run in `run_dir`: the one given (`argv`, as
    sys.argv), its --run-dir set to that dir. The program as typed: `ppomq` where that is
    the one on PATH."""
    program = argv[0]
    on_path = shutil.which("ppomq")
    same = on_path and os.path.realpath(on_path) == os.path.realpath(program)
    if same or program.endswith(".py"):  # `python -m ppomq.cli`: argv[0] is the module
        program = "ppomq"
    args, rest = [], list(argv[1:])
    while rest:
        arg = rest.pop(0)
        if arg == "--run-dir":
            if rest:
                rest.pop(0)
            continue
        if not arg.startswith("--run-dir="):
            args.append(arg)
    return shlex.join([program, *args, "--run-dir", str(run_dir)])


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


def preset_words(settings: TrainSettings) -> str:
    """The first line's word on the preset: which one, and for `auto` what in the env's
    spaces chose it (the spaces were read once, for the settings: asking again is free)."""
    chosen = settings.preset or NO_PRESET
    name, why = auto_preset(settings.env_id) if chosen == AUTO else (chosen, "")
    words = f"preset {name}" + (" (the built-in defaults)" if name == NO_PRESET else "")
    return f"{words}, picked for its {why} (--preset NAME to choose)" if why else words


def first_line(settings: TrainSettings, run_dir: Path, data_plane: str) -> str:
    steps = f", {settings.total_steps:,} env steps" if settings.total_steps else ""
    learners = f", a group of {settings.learners} learners" if settings.learners > 1 else ""
    return (
        f"ppomq train: {settings.env_id}, {preset_words(settings)}, {settings.mode} mode, "
        f"{settings.actors} actor(s){learners}{steps}; run dir {run_dir}; {data_plane}"
    )


def _run(launcher: Launcher, settings: TrainSettings, data_plane: str) -> int:
    print(first_line(settings, launcher.run_dir, data_plane), flush=True)
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
    code = 1
    progress: Progress | None = None
    signals = StopSignals(launcher).install()
    try:
        launcher.start()
        progress = Progress(launcher) if settings.progress else None
        code = launcher.supervise(progress)
    except (KeyboardInterrupt, Terminated):
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
    # Stopped by a signal before the run's end: it said so, and how to go on with it.
    stopped = signals.signum is not None and signals.exit_code() != 0
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        print(summary_text(summary, launcher.run_dir, stopped=stopped), flush=True)
        print(run_dir_size_line(launcher.run_dir, settings.keep_versions), flush=True)
    if stopped and (launcher.run_dir / CHECKPOINT_FILE).exists():
        print(f"resume it with: {resume_command(sys.argv, launcher.run_dir)}", flush=True)
    if launcher.failure is not None:
        raise launcher.failure
    if signals.signum is not None:
        # A stop signal came, while supervising or later, during the stop (the learner's
        # final evaluation runs then): 128 + it, unless the run had finished before it.
        if not summary_path.exists():
            note(f"stopped before the learner wrote a summary; see {launcher.run_dir / 'logs'}")
        return signals.exit_code()
    if summary_path.exists():
        return code
    raise UserError(
        f"the learner exited with {code} before writing a summary; "
        f"see {launcher.run_dir / 'logs' / 'learner.log'}"
    )
