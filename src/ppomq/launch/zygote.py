"""A preloading fork server ("zygote") for `ppomq train`'s Python children.

Every service imports torch, numpy, gymnasium, zmq and redis: seconds and hundreds of MB
each when each child is a fresh interpreter. Instead the launcher starts one server process (the
standard library's forkserver, with `set_forkserver_preload`; itself forked from the
launcher, see `_fork_server`) that imports the rest once (ppomq.launch.zygote_preload),
freezes the GC and then forks each child on request, so the children start at once and
share those pages copy-on-write. A child then runs `python -m ppomq.cli ARGV` as a
service expects: settings from its PPOMQ_* environment alone, stdout and stderr to its
log, its own session, and it dies with the server, which dies with the launcher.

What the standard library does not offer is kept, each with its reason: forking the
server from the launcher (`_fork_server`), a child the launcher does not join at exit
(`fork`), a child that lets go of the server's "alive" pipe (`_child_main`), and waiting
for the server at the end (`stop_server`).

This module stays light: the launcher imports it, and must not pay for torch.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import multiprocessing
import os
import signal
import socket
import sys
import threading
from multiprocessing import connection, forkserver, resource_tracker, util
from multiprocessing.context import ForkServerProcess
from pathlib import Path
from typing import Any

from ppomq.core.procutil import die_with_parent, set_process_title

# What the server imports before its first fork: the services' module-level imports
# (and through them torch, numpy, gymnasium, zmq, redis, msgpack, pydantic) and the CLI
# that a child runs. Things only one service loads later (the learner's optimizer,
# tensorboardX, matplotlib) stay out: sharing them saves nothing, importing them here
# would delay every child.
PRELOAD = (
    "ppomq.actor.service",
    "ppomq.learner.service",
    "ppomq.weightserver.service",
    "ppomq.core.envs",
    "gymnasium.envs.classic_control",
    "ppomq.cli",  # and, in ppomq.launch.zygote_preload, every ppomq.commands module it loads
)

_CONTEXT = multiprocessing.get_context("forkserver")


def start_server() -> None:
    """Start the server now, without waiting for it: its imports then overlap whatever
    the launcher does next (Redis). Idempotent; a server that died is started again."""
    _CONTEXT.set_forkserver_preload(["ppomq.launch.zygote_preload"])
    server = forkserver._forkserver
    with server._lock:  # type: ignore[attr-defined]
        if server._forkserver_pid is None and threading.active_count() == 1:
            _fork_server(server)
            return
    # A server that died, started again while the launcher runs threads (which a fork
    # would copy in whatever state they are): the standard library's fresh interpreter.
    forkserver.ensure_running()


def _fork_server(server: Any) -> None:
    """The standard library's `ForkServer.ensure_running`, with the server forked from
    this process instead of spawned as a fresh interpreter: it starts with what the
    launcher has imported already (pydantic and the settings, gymnasium, numpy, redis) and
    imports only the rest (torch). With the documented way alone (`set_forkserver_preload`
    and the fresh server it spawns) the launcher's first child started 0.3 s later (median
    of 5 paired starts on a 2-core machine: 3.2 s against 2.8 s), on the path to every
    run's first env step. Same protocol, same socket and "alive" pipe, so
    `ForkServerProcess` and `stop_server` work unchanged."""
    resource_tracker.ensure_running()
    address = connection.arbitrary_address("AF_UNIX")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(address)
        if not util.is_abstract_socket_namespace(address):
            os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # not written twice, by both processes
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the server; it never returns into the launcher's code
            code = 1
            try:
                fd = listener.detach()
                os.close(alive_w)
                server._lock = threading.Lock()  # copied while held (the `with` above)
                # What a fresh interpreter has: only these descriptors (not the launcher's
                # logs and pipes, which every child would otherwise hold open too) and the
                # default handlers (not `ppomq train`'s SIGTERM one).
                _close_fds_except({0, 1, 2, fd, alive_r})
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                forkserver.main(fd, alive_r, ["ppomq.launch.zygote_preload"])
            except SystemExit:
                code = 0  # the launcher closed the "alive" pipe: stop
            except BaseException:
                sys.excepthook(*sys.exc_info())
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        os.close(alive_r)
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid


def _close_fds_except(keep: set[int]) -> None:
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every possible descriptor
        fds = list(range(os.sysconf("SC_OPEN_MAX")))
    for fd in fds:
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own, closed already
                os.close(fd)


def stop_server() -> None:
    """Stop the server and wait for it, once every child has exited: the server reaps its
    children, so only then do their CPU times count in ours (rusage), and its socket file
    is removed. The standard library has no public way to stop its server; `_stop` is the
    one its own tests use."""
    with contextlib.suppress(Exception):
        forkserver._forkserver._stop()  # type: ignore[attr-defined]


def fork(name: str, argv: list[str], env: dict[str, str], log_path: Path) -> ForkServerProcess:
    """Fork `ppomq ARGV` from the server as process `name`; blocks until it has a pid
    (on the first call, until the server has finished its imports)."""
    start_server()
    log_path.touch()  # exists once we return: the supervisor reads it at once
    proc = _CONTEXT.Process(target=_child_main, args=(name, argv, env, str(log_path)), name=name)
    proc.start()
    # The launcher stops its children itself. multiprocessing would also join each one at
    # interpreter exit, so a forced exit (a second Ctrl-C, a crash) would hang on them; it
    # has no public way to leave a child out, so it is dropped from the set it joins.
    # Untracked, a child dies with the server, which dies with the launcher.
    multiprocessing.process._children.discard(proc)  # type: ignore[attr-defined]
    return proc


def _child_main(name: str, argv: list[str], env: dict[str, str], log_path: str) -> None:
    """Runs in the forked child, before anything of the service."""
    server = os.getppid()
    # The chain of deaths: launcher -> server (PDEATHSIG SIGKILL, ppomq.launch.zygote_preload)
    # -> this child (SIGTERM: the service's warm stop, as with subprocess before).
    die_with_parent()
    if os.getppid() != server:
        os._exit(1)  # the server died before prctl took effect: nobody would stop us
    os.setsid()  # own session: a Ctrl-C at the terminal reaches only the launcher
    # ps, psutil and the benchmarks show the command this child runs, not the server's.
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
    gc.enable()  # the server ran with it off (see ppomq.launch.zygote_preload)
    print(f"{name}: forked from ppomq zygote pid {server} (torch preloaded: {preloaded})")

    from ppomq.cli import main

    try:
        code = main(argv)
    finally:
        # multiprocessing ends a child with os._exit: run what a normal exit would.
        atexit._run_exitfuncs()
    sys.exit(code)
