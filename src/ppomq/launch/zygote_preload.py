"""Imported by `ppomq train`'s fork server only (see ppomq.launch.zygote): the heavy imports, once.

Nothing here may start a thread, open a socket, create a zmq context or run a torch op:
every child is forked from this process, and none of those survive a fork intact.
"""

from __future__ import annotations

import gc

# No collections from here on: a collection frees objects into holes that the children's
# allocations would then dirty, and touches every tracked object's header. Each child
# turns collection back on after the fork.
gc.disable()

import atexit  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import weakref  # noqa: E402

from ppomq.core.procutil import die_with_parent, set_process_title  # noqa: E402
from ppomq.launch.zygote import PRELOAD  # noqa: E402

_launcher = os.getppid()
# Die with the launcher at once, even when it is SIGKILLed: the forkserver's own guard (EOF
# on a pipe from the launcher) is read only after these imports, and only once no child
# holds a copy of that pipe. The children die with us in turn (ppomq.launch.zygote).
die_with_parent(signal.SIGKILL)
if os.getppid() != _launcher:
    os._exit(0)
os.setsid()  # out of the terminal's process group: Ctrl-C and group signals miss us
# Named for ps and the benchmarks (which tell the server by "multiprocessing.forkserver"):
# forked from the launcher, it would otherwise show the launcher's command line.
set_process_title("ppomq-zygote", f"{sys.executable} (ppomq zygote: multiprocessing.forkserver)")


def _exit_without_teardown(server: int = os.getpid()) -> None:
    """The server's last exit handler (registered first, so it runs after the others):
    skip the interpreter's teardown, which with torch loaded adds to the end of every
    `ppomq train` (the launcher waits for the server). The server holds no files or
    buffers that need it. Forked children inherit the handler; it does nothing there."""
    if os.getpid() == server:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)


atexit.register(_exit_without_teardown)

from ppomq.cli import COMMAND_MODULES  # noqa: E402

# torch's import scans every installed distribution's entry points for out-of-tree device
# backends (tens of ms with a development install's hundred packages, on the path to every
# run's first env step). ppomq trains on the CPU or CUDA, both built into torch. A value the
# user set is kept.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

for _name in (*PRELOAD, *(f"ppomq.commands.{c}" for c in COMMAND_MODULES)):
    # A module that fails here fails again in the child that needs it, with its traceback
    # in that child's log; the others still get a server.
    with contextlib.suppress(Exception):
        importlib.import_module(_name)

# torch registers one weakref.finalize per operator library that, at exit, unregisters it
# from the dispatcher: a noticeable pause at the end of every child (their atexit handlers run in
# ppomq.launch.zygote) for a process that then ends with os._exit anyway. They still run if a
# library is collected before; only the at-exit call is dropped. (`_registry` is how the
# standard library itself lists live finalizers; `peek` and `atexit` are public.)
for _fin in list(getattr(weakref.finalize, "_registry", {})):
    _info = _fin.peek()
    if _info is not None and getattr(_info[1], "__module__", "").startswith("torch."):
        _fin.atexit = False

# Everything alive now moves to a permanent generation that the children's collections
# never scan, so their GC does not write to (and so copy) the shared pages.
gc.freeze()
