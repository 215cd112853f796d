"""The launcher's children come from a preloading fork server (src/ppomq/launch/zygote.py).

A small driver script plays the launcher (`ppomq.launch.child.Child`, as `ppomq train` uses it)
so that it can be SIGKILLed; its child is a real weightserver on the suite's Redis,
configured through PPOMQ_* alone.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.support import free_port, wait_until

# argv: log path, redis url, run id, bind, one of "sleep" (stay, to be killed) or "cycle"
# (SIGKILL the child, start it again, SIGTERM it; print the exit codes), the repository.
DRIVER = """
import json, os, signal, sys
log, redis_url, run_id, bind, what, repo = sys.argv[1:]
sys.path.insert(0, repo)  # tests.support
from pathlib import Path
from ppomq.launch.child import Child
from ppomq.launch.wiring import child_env
from ppomq.core.settings import WeightserverSettings
from tests.support import wait_until

settings = WeightserverSettings(redis_url=redis_url, run_id=run_id, bind=bind)
child = Child("weightserver", ["weightserver"], child_env(settings), Path(log))

def running():
    assert child.poll() is None, Path(log).read_text()

def start():
    child.start()
    wait_until(lambda: Path(log).read_text().count("listening on") >= child.restarts + 1, 60,
               "the weightserver to listen", check=running, context=Path(log).read_text)
    return child.proc.pid

out = {"pids": [start()], "driver": os.getpid()}
if what == "sleep":
    print(json.dumps(out), flush=True)
    signal.pause()  # until the test kills it
os.kill(child.proc.pid, 9)
out["killed"] = child.wait(10)
child.restarts += 1
out["pids"].append(start())
child.terminate()
out["terminated"] = child.wait(20)
print(json.dumps(out), flush=True)
"""


def _driver(tmp_path: Path, redis_url: str, what: str) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / "weightserver.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    args = [log, redis_url, "zygote-test", f"tcp://127.0.0.1:{free_port()}", what, REPO]
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, *map(str, args)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc, log


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as fh:
        return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)


def _running(pid: int) -> bool:
    try:
        return _status(pid)["State"][0] != "Z"
    except FileNotFoundError:
        return False


def test_children_are_forked_from_the_preloaded_server_and_die_with_a_killed_launcher(
    tmp_path, redis_url
):
    driver, log = _driver(tmp_path, redis_url, "sleep")
    try:
        assert driver.stdout is not None
        ready, _, _ = select.select([driver.stdout], [], [], 90)
        assert ready, "the driver did not start its child in time"
        out = json.loads(driver.stdout.readline())
        child = out["pids"][0]
        server = int(_status(child)["PPid"])
        # The child's parent is the fork server, which the launcher started and named.
        assert _status(child)["Name"] == "weightserver"
        # ps and psutil show the command the child stands for, not the server's.
        with open(f"/proc/{child}/cmdline") as fh:
            assert fh.read().rstrip("\0").endswith(" -m ppomq.cli weightserver")
        assert _status(server)["Name"] == "ppomq-zygote"
        assert int(_status(server)["PPid"]) == out["driver"]
        # Own session (Ctrl-C at the terminal reaches only the launcher), as before.
        assert os.getsid(child) == child
        assert os.getsid(server) != os.getsid(out["driver"])
        text = log.read_text()
        # torch was already imported when the service started: it came from the server.
        assert f"weightserver: forked from ppomq zygote pid {server} (torch preloaded: True)" in (
            text
        )
        # Configured through PPOMQ_* only (the run id is nowhere else), logging to its file.
        assert "weightserver for run 'zygote-test' listening on" in text

        driver.kill()  # SIGKILL: the launcher runs no cleanup at all
        driver.wait()
        wait_until(lambda: not _running(server), 20, "the fork server to exit with the launcher")
        wait_until(lambda: not _running(child), 20, "the child to exit with the launcher")
        # It stopped through its SIGTERM handler (the death signal), not by a kill.
        assert "weightserver stopped (warm stop)" in log.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()


def test_a_sigkilled_child_is_restarted_from_the_server_and_sigterm_stops_it_warm(
    tmp_path, redis_url
):
    driver, log = _driver(tmp_path, redis_url, "cycle")
    out_text, _ = driver.communicate(timeout=120)
    assert driver.returncode == 0, out_text
    out = json.loads(out_text)
    assert out["killed"] == -signal.SIGKILL  # exit codes come back as Popen's did
    # The service's own exit code for a SIGTERM before its run's end (ppomq.core.signals).
    assert out["terminated"] == 128 + signal.SIGTERM
    first, second = out["pids"]
    assert first != second
    text = log.read_text()  # both incarnations append to the one log
    assert text.count("forked from ppomq zygote pid") == 2
    assert text.count("(torch preloaded: True)") == 2
    assert "weightserver stopped (warm stop)" in text


def test_the_launcher_itself_does_not_import_torch():
    # `ppomq train` with a bad setting fails before anything starts, without torch's ~2 s.
    code = "import sys, ppomq.launch, ppomq.launch.zygote; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
