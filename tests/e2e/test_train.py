"""End to end: `ppomq train` as a user runs it — real Redis, real processes, real sockets."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import threading
from pathlib import Path

import psutil
import pytest
import redis

from tests.support import free_port, wait_until

from .cli import PPOMQ, SMALL
from .cli import clean_env as _env

pytestmark = pytest.mark.slow

# The greedy return this 6,000-step CartPole run's policy reaches (46 and 52.5 on the two
# evaluations here, run after run): twice what acting at random averages (about 22); a policy
# that always pushes the same way scores about 9.
TRAINED_CARTPOLE = 40.0


def _run(args: list[str], timeout: float = 240, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        PPOMQ + args, capture_output=True, text=True, timeout=timeout, env=_env(), **kw
    )


def test_train_runs_to_total_steps_and_leaves_a_complete_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    out = _run(["train", "--actors", "2", "--total-steps", "6000", "--run-dir", str(run_dir),
                *SMALL])  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("env_id", "mode", "actors", "total_env_steps", "wall_seconds", "sps",
                "versions", "batches_accepted", "batches_rejected", "solved_at_env_steps",
                "final_eval_return"):  # fmt: skip
        assert key in summary, key
    assert summary["total_env_steps"] >= 6000
    assert summary["versions"] >= 5
    assert summary["batches_accepted"] >= 5
    # The actors that trained, counted from accepted batches (not the --actors hint).
    assert summary["actors"] == 2 and summary["actors_hint"] == 2
    assert all(a["accepted"] > 0 for a in summary["actors_seen"].values())
    # Trained, not just run (TRAINED_CARTPOLE).
    assert summary["final_eval_return"] >= TRAINED_CARTPOLE
    for name in ("settings.json", "episodes.csv", "progress.csv", "final_weights.pt",
                 "learning_curve.png", "checkpoints/ckpt.pt"):  # fmt: skip
        assert (run_dir / name).exists(), name
    assert any((run_dir / "tb").iterdir())
    # Every service was forked from the launcher's preloading server (ppomq.launch.zygote).
    for name in ("weightserver", "learner", "actor-0", "actor-1"):
        assert "(torch preloaded: True)" in (run_dir / "logs" / f"{name}.log").read_text()
    # The run's own actors heard the end from the weightserver and exited 0 by themselves,
    # so it had nobody left to wait for (signalled, they used to leave it its whole grace).
    for name in ("actor-0", "actor-1"):
        assert "run 'default' finished: actor" in (run_dir / "logs" / f"{name}.log").read_text()
    assert "did not ask again" not in (run_dir / "logs" / "weightserver.log").read_text()
    # The learning signal is real: later episodes are longer than the first ones.
    rows = (run_dir / "episodes.csv").read_text().splitlines()[1:]
    returns = [float(r.split(",")[2]) for r in rows]
    assert sum(returns[-10:]) / 10 > sum(returns[:10]) / 10

    ev = _run(["eval", "--run-dir", str(run_dir), "--episodes", "2", "--json"])
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["mean_return"] >= TRAINED_CARTPOLE


def test_sync_mode_trains_on_one_fresh_batch_per_actor_per_version(tmp_path):
    run_dir = tmp_path / "sync"
    out = _run(["train", "--mode", "sync", "--actors", "2", "--total-steps", "3000",
                "--run-dir", str(run_dir), *SMALL])  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "sync"
    # Every trained batch was collected by the version being trained (age 0).
    assert set(summary["policy_age_histogram"]) == {"0"}
    # One batch from each of the 2 actors per version (a last, incomplete set is dropped).
    assert 2 * summary["versions"] <= summary["batches_accepted"] <= 2 * summary["versions"] + 1


def test_an_actor_killed_mid_rollout_is_restarted_and_the_learner_keeps_training(tmp_path):
    run_dir = tmp_path / "kill"
    proc = subprocess.Popen(
        [*PPOMQ, "train", "--actors", "2", "--duration-s", "20", "--total-steps", "0",
         "--run-dir", str(run_dir), *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
    )  # fmt: skip
    try:
        settings = run_dir / "settings.json"
        wait_until(lambda: settings.exists() and settings.read_text().endswith("\n"), 60,
                   "settings.json")  # fmt: skip
        cfg = json.loads(settings.read_text())
        r = redis.Redis.from_url(cfg["redis_url"])
        key = f"ppomq:{cfg['run_id']}:actors"
        stats_key = f"ppomq:{cfg['run_id']}:stats"

        def published() -> int:
            return json.loads(r.get(stats_key))["version"]

        wait_until(lambda: len(r.hkeys(key)) >= 2, 60, "both actors in the learner's status")
        version_before = published()
        status = _run(["status", "--run-dir", str(run_dir), "--json"])
        assert status.returncode == 0, status.stderr
        live = json.loads(status.stdout)
        # The version `ppomq status` shows is one the run published while it looked.
        assert len(live["actors"]) == 2 and version_before <= live["version"] <= published()
        assert {"policy_age", "last_seen_s_ago"} <= set(live["actors"][0])
        victim = sorted(k.decode() for k in r.hkeys(key))[0]
        os.kill(int(victim.split("-")[1]), signal.SIGKILL)
        before = json.loads(r.get(stats_key))["batches_accepted"]
        # The restarted actor reports under a new id.
        wait_until(lambda: len(r.hkeys(key)) >= 3, 60, "the killed actor's restart")
        # Training goes on: the count moves.
        wait_until(lambda: json.loads(r.get(stats_key))["batches_accepted"] > before, 60,
                   "a batch accepted after the kill")  # fmt: skip
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "restarting" in output
    index = victim.split("-")[0].removeprefix("a")  # actor ids are a<index>-<pid>-<random>
    restarted = (run_dir / "logs" / f"actor-{index}.log").read_text()
    assert restarted.count("forked from ppomq zygote") == 2  # again from the server
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["batches_accepted"] > before


def test_a_restarted_run_resumes_from_its_checkpoint(tmp_path):
    run_dir = tmp_path / "resume"
    first = _run(["train", "--total-steps", "2000", "--run-dir", str(run_dir), *SMALL])
    assert first.returncode == 0, first.stdout + first.stderr
    s1 = json.loads((run_dir / "summary.json").read_text())
    second = _run(["train", "--total-steps", "4000", "--run-dir", str(run_dir), *SMALL])
    assert second.returncode == 0, second.stdout + second.stderr
    s2 = json.loads((run_dir / "summary.json").read_text())
    # Counters and versions continue from the checkpoint instead of starting over.
    assert s2["total_env_steps"] >= 4000
    assert s2["total_env_steps"] - s1["total_env_steps"] < 4000
    assert s2["versions"] > s1["versions"]
    assert "resumed from" in (run_dir / "logs" / "learner.log").read_text()
    # The first run's versions were kept in the run dir and found again by the second.
    listed = _run(["weights", "list", "--run-dir", str(run_dir), "--json"])
    assert listed.returncode == 0, listed.stderr
    versions = [v["version"] for v in json.loads(listed.stdout)["versions"]]
    assert versions[-1] == s2["versions"] and s1["versions"] in versions


def _one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr + out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_unknown_env_id_is_one_line_naming_the_fix(tmp_path):
    out = _run(["train", "--env-id", "NoSuchEnv-v9", "--run-dir", str(tmp_path / "x")])
    assert out.returncode == 2
    assert "--env-id" in _one_line_error(out)


def test_unreachable_redis_is_one_line_exit_4(tmp_path):
    out = _run(["train", "--redis-url", "redis://127.0.0.1:1/0", "--run-dir", str(tmp_path)])
    assert out.returncode == 4
    assert "--redis-url" in _one_line_error(out)


def test_impossible_setting_is_one_line_exit_2(tmp_path):
    out = _run(["train", "--max-staleness", "9", "--keep-versions", "4"])
    assert out.returncode == 2
    assert "keep-versions" in _one_line_error(out)


def test_learner_port_in_use_is_one_line_naming_the_fix(tmp_path, redis_url):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = _run(["learner", "--redis-url", redis_url, "--rollout-bind",
                    f"tcp://127.0.0.1:{port}", "--run-dir", str(tmp_path / "l")])  # fmt: skip
    assert out.returncode == 2
    assert "--rollout-bind" in _one_line_error(out)


@pytest.mark.parametrize(
    ("service", "flag"), [("learner", "--rollout-bind"), ("weightserver", "--bind")]
)
def test_a_service_binding_beyond_loopback_without_curve_refuses_to_start(
    tmp_path, redis_url, service, flag
):
    port = free_port()
    run_dir = ["--run-dir", str(tmp_path / "l")] if service == "learner" else []
    out = _run([service, "--redis-url", redis_url, flag, f"tcp://*:{port}", *run_dir])
    assert out.returncode == 2
    line = _one_line_error(out)
    assert f"{flag} tcp://*:{port} reaches beyond loopback" in line
    assert "--insecure-plaintext" in line


def test_status_reports_a_finished_runs_learner(tmp_path):
    out = _run(["status", "--redis-url", "redis://127.0.0.1:1/0", "--run-id", "nope"])
    assert out.returncode == 4
    _one_line_error(out)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_process_leaves_a_summary_and_exits_128_plus_it(tmp_path, sig):
    """Ctrl-C (SIGINT to the terminal's whole group) or a scheduler's SIGTERM (to the
    launcher alone): a warm stop, and the exit code says the run was interrupted (130,
    143), so `ppomq train && ppomq eval` or a scheduler does not take it for finished."""
    proc = subprocess.Popen(
        [*PPOMQ, "train", "--total-steps", "0", *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
        start_new_session=True, cwd=tmp_path,
        # As from a terminal: a suite started in the background (`&`, nohup) hands its
        # children SIGINT ignored, and then Ctrl-C rightly does nothing.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        wait_until(lambda: list(tmp_path.glob("runs/*/progress.csv")), 60, "a run dir")
        (progress,) = tmp_path.glob("runs/*/progress.csv")
        run_dir = progress.parent.relative_to(tmp_path)  # as the launcher names it
        wait_until(lambda: _rows(progress) >= 2, 60, "2 updates in progress.csv")
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: the whole group
        else:
            proc.send_signal(sig)  # `kill PID`, a scheduler's stop
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, output
    assert "Traceback" not in output
    summary = json.loads((tmp_path / run_dir / "summary.json").read_text())
    assert summary["versions"] == _rows(progress)  # a row per version, the last one too
    # It says it stopped short, and the command that goes on with it (no --run-dir given:
    # the one the launcher made, which a new run without it would not reuse).
    assert "\nstopped before the run's end: " in output and "\ndone: " not in output
    resume = f"resume it with: ppomq train --total-steps 0 {' '.join(SMALL)} --run-dir {run_dir}"
    assert resume in output.splitlines(), output
    assert "  run dir size: " in output and "--keep-versions" in output
    assert not (tmp_path / run_dir / ".lock").exists()  # released with the run, the file too
    # Nothing of the run is left behind: no process still holds its log files open.
    cfg = json.loads((tmp_path / run_dir / "settings.json").read_text())
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(cfg["redis_url"], socket_connect_timeout=1).ping()


def test_a_killed_launcher_takes_its_processes_with_it(tmp_path):
    run_dir = tmp_path / "orphans"
    proc = subprocess.Popen(
        [*PPOMQ, "train", "--total-steps", "0", "--run-dir", str(run_dir), *SMALL],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(),
    )  # fmt: skip
    try:
        progress = run_dir / "progress.csv"
        wait_until(lambda: _rows(progress) >= 1, 60, "an update in progress.csv")
        cfg = json.loads((run_dir / "settings.json").read_text())
        r = redis.Redis.from_url(cfg["redis_url"])
        # The learner writes progress.csv a moment before the actors' status.
        pids = wait_until(
            lambda: [
                int(k.decode().split("-")[1]) for k in r.hkeys(f"ppomq:{cfg['run_id']}:actors")
            ],
            60,
            "the actors in the learner's status",
        )
        # Everything the launcher started, directly or through its fork server.
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert set(pids) <= set(tree) and len(tree) >= len(pids) + 3
        published = int(r.get(f"ppomq:{cfg['run_id']}:latest"))
        proc.kill()  # SIGKILL: the launcher runs no cleanup at all
        proc.wait()
        wait_until(lambda: not any(map(_running, pids)), 30, "the actors to die with the launcher")
        wait_until(lambda: not any(map(_running, tree)), 30, "every process to die with it")
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(cfg["redis_url"], socket_connect_timeout=1).ping()
        # What the run had published before the kill outlived it, in its run dir.
        listed = _run(["weights", "list", "--run-dir", str(run_dir), "--json"])
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["latest"] >= published
    finally:
        if proc.poll() is None:
            proc.kill()


def _rows(csv_path: Path) -> int:
    """Rows under the header of a CSV the learner appends to (0 before it exists)."""
    return max(len(csv_path.read_text().splitlines()) - 1, 0) if csv_path.exists() else 0


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_an_actor_added_by_hand_is_told_the_run_ended_and_exits_0(tmp_path):
    """`ppomq actor` pointed at a running `ppomq train`: when the run ends, the weightserver
    stays until that actor has heard it too, and the actor exits 0 (it used to hang in
    send forever once the launcher had stopped the weightserver)."""
    rollout, weights = free_port(), free_port()
    run_dir = tmp_path / "byhand"
    # The run's data plane is CURVE: a third key pair, made before the run, lets it in.
    keys = run_dir / "keys"
    made = subprocess.run([*PPOMQ, "keys", "generate", "--out", str(keys), "--actors", "3"],
                          capture_output=True, text=True, env=_env(), timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    # The actor starts first and is running before the run does, and the run is long enough
    # for the weights it waits for to reach it: 6,000 steps took 0.8 s of training on an idle
    # machine, over before its first batch (its first weights came 2 s after its start).
    actor = subprocess.Popen(
        [*PPOMQ, "actor", "--run-id", "byhand", "--env-id", "CartPole-v1", "--num-envs", "4",
         "--num-steps", "32", "--actor-index", "7",
         "--learner-addr", f"tcp://127.0.0.1:{rollout}",
         "--weightserver-addr", f"tcp://127.0.0.1:{weights}",
         "--curve-actor-cert", str(keys / "actors" / "actor-2.key_secret"),
         "--curve-server-public-cert", str(keys / "server.key")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in actor.stdout], daemon=True)
    reader.start()
    seen: list[str] = []
    while not any(" -> tcp://" in x for x in seen):  # its start line, before its loop
        try:
            seen.append(lines.get(timeout=120))
        except queue.Empty:
            actor.kill()
            pytest.fail(f"the actor did not start: {''.join(seen)}")
    train = subprocess.Popen(
        [*PPOMQ, "train", "--run-id", "byhand", "--total-steps", "30000", "--run-dir",
         str(run_dir), "--rollout-bind", f"tcp://127.0.0.1:{rollout}",
         "--weightserver-bind", f"tcp://127.0.0.1:{weights}", *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
    )  # fmt: skip
    try:
        train_out, _ = train.communicate(timeout=240)
        assert train.returncode == 0, train_out
        returncode = actor.wait(timeout=60)  # an actor never told the run ended hangs here
        reader.join(timeout=10)
        while not lines.empty():
            seen.append(lines.get())
        assert returncode == 0, "".join(seen)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["actors"] == 3  # the hand-added actor's batches were trained on
    finally:
        for proc in (train, actor):
            if proc.poll() is None:
                proc.kill()


def test_the_same_command_on_a_finished_run_changes_nothing(tmp_path):
    run_dir = tmp_path / "again"
    args = ["train", "--total-steps", "2000", "--run-dir", str(run_dir), *SMALL]
    first = _run(args)
    assert first.returncode == 0, first.stdout + first.stderr
    files = ("summary.json", "progress.csv", "episodes.csv", "checkpoints/ckpt.pt")
    before = {f: (run_dir / f).read_bytes() for f in files}
    again = _run(args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already reached its end" in again.stdout and "nothing to train" in again.stdout
    assert {f: (run_dir / f).read_bytes() for f in files} == before
    summary = json.loads(before["summary.json"])
    last = (run_dir / "progress.csv").read_text().splitlines()[-1].split(",")[0]
    assert summary["versions"] == int(last) and summary["learner_restarts"] == 0
