"""A preloading fork server ("zygote") for `ppomq train`'s Python children.

Every service imports torch, numpy, gymnasium, zmq and redis: ~1.8 s and ~250 MB each when
each child is a fresh interpreter. Instead the launcher starts one server process (the
standard library's forkserver) that imports all of it once (ppomq.zygote_preload), freezes
the GC and then forks each child on request, so the children start at once and share those
pages copy-on-write. A child then turns itself into what `python -m ppomq.cli ARGV` under
`subprocess.Popen(env=ENV, stdout=LOG, stderr=STDOUT, stdin=DEVNULL,
start_new_session=True, preexec_fn=die_with_parent)` was: same settings path, same logs.

This module stays light: the launcher imports it, and must not pay for torch.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import multiprocessing
import os
import sys
from multiprocessing import forkserver
from multiprocessing.context import ForkServerProcess
from pathlib import Path

from .procutil import die_with_parent, set_process_title

# What the server imports before its first fork: the services' module-level imports
# (and through them torch, numpy, gymnasium, zmq, redis, msgpack, pydantic) and the CLI
# that a child runs. Things only one service loads later (the learner's optimizer,
# tensorboardX, matplotlib) stay out: sharing them saves nothing, importing them here
# would delay every child.
PRELOAD = (
    "ppomq.actor.service",
    "ppomq.learner.service",
    "ppomq.weightserver.server",
    "ppomq.envs",
    "gymnasium.envs.classic_control",
    "ppomq.cli",  # and, in ppomq.zygote_preload, every ppomq.commands module it loads
)

_CONTEXT = multiprocessing.get_context("forkserver")


def start_server() -> None:
    """Start the server now, without waiting for it: its imports then overlap whatever
    the launcher does next (Redis). Idempotent; a server that died is started again."""
    _CONTEXT.set_forkserver_preload(["ppomq.zygote_preload"])
    forkserver.ensure_running()


def stop_server() -> None:
    """Stop the server and wait for it, once every child has exited: the server reaps its
    children, so only then do their CPU times count in ours (rusage), and its socket file
    is removed. `_stop` is private but is what the standard library's own tests use."""
    with contextlib.suppress(Exception):
        forkserver._forkserver._stop()  # type: ignore[attr-defined]


def fork(name: str, argv: list[str], env: dict[str, str], log_path: Path) -> ForkServerProcess:
    """Fork `ppomq ARGV` from the server as process `name`; blocks until it has a pid
    (on the first call, until the server has finished its imports)."""
    start_server()
    log_path.touch()  # exists once we return, as when the launcher opened it for Popen
    proc = _CONTEXT.Process(target=_child_main, args=(name, argv, env, str(log_path)), name=name)
    proc.start()
    # The launcher stops its children itself. multiprocessing would also join each one at
    # interpreter exit, so a forced exit (a second Ctrl-C, a crash) would hang on them;
    # untracked, they die as with Popen: with the server, which dies with the launcher.
    multiprocessing.process._children.discard(proc)  # type: ignore[attr-defined]
    return proc


def _child_main(name: str, argv: list[str], env: dict[str, str], log_path: str) -> None:
    """Runs in the forked child, before anything of the service."""
    server = os.getppid()
    # The chain of deaths: launcher -> server (PDEATHSIG SIGKILL, ppomq.zygote_preload)
    # -> this child (SIGTERM: the service's warm stop, as with subprocess before).
    die_with_parent()
    if os.getppid() != server:
        os._exit(1)  # the server died before prctl took effect: nobody would stop us
    os.setsid()  # own session: a Ctrl-C at the terminal reaches only the launcher
    # What ps, psutil and the benchmarks showed for the subprocess this child replaces.
    set_process_title(name, " ".join([sys.executable, "-m", "ppomq.cli", *argv]))
    # multiprocessing hands each child the launcher's end of the server's "alive" pipe;
    # holding it would keep the server's own guard (EOF when the launcher is gone) open.
    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
        forkserver._forkserver._forkserver_alive_fd = None
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # Unbuffered like PYTHONUNBUFFERED=1, which the server's own streams predate.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), write_through=True, errors="backslashreplace"
    )
    # The container contract: the service reads its settings from PPOMQ_* alone.
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["ppomq", *argv]
    preloaded = "torch" in sys.modules
    gc.enable()  # the server ran with it off (see ppomq.zygote_preload)
    print(f"{name}: forked from ppomq zygote pid {server} (torch preloaded: {preloaded})")

    from .cli import main

    try:
        code = main(argv)
    finally:
        # multiprocessing ends a child with os._exit: run what a normal exit would.
        atexit._run_exitfuncs()
    sys.exit(code)
