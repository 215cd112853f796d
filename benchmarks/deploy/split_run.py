"""One ppomq run split over two network hosts, as docs/guides/local-runs.md ("Running the
services by hand") spreads a run over machines: the learner host runs Redis, the
weightserver and the learner; the actor host runs the actors. Each host is a network
namespace of this machine (benchmarks.deploy.netns.Lab) with its own address, linked by a
veth pair through a bridge, so every batch and every weight fetch crosses TCP between
two addresses, under CURVE (keys made for the run, as a bind beyond loopback requires).
Needs root.

    python -m benchmarks.deploy.split_run --run-dir DIR [--actors 1] \\
        --learner-args "--env-id ... --total-steps N ..." \\
        --actor-args "--env-id ... --num-envs 8 ..."

The run ends as a run by hand does: the learner marks it finished and the weightserver
and the actors exit by themselves; then Redis is stopped and the namespaces deleted.
Every process writes DIR/events.jsonl, so the run dir reads as a `ppomq train` run's
(summary.json, progress.csv, episodes.csv, events). Exit 0 when every service exited 0.
Each host's output is in DIR/hosts/HOST.log.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.deploy.netns import Lab, open_lab, why_not_netns
from benchmarks.harness import ppomq_argv as ppomq
from ppomq.core.events import EVENTS_FILE

LEARNER_HOST, ACTOR_HOST = "learner-host", "actor-host"
ROLLOUT_PORT, WEIGHTS_PORT, REDIS_PORT = 5555, 5556, 6379
RUN_ID = "split"


def _wait(what: str, ready, lab: Lab, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        lab.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout_s:.0f} s")
        time.sleep(0.05)


def run(run_dir: Path, learner_args: list[str], actor_args: list[str], actors: int,
        timeout_s: float) -> int:  # fmt: skip
    hosts_dir = run_dir / "hosts"
    hosts_dir.mkdir(parents=True)
    keys = run_dir / "keys"
    subprocess.run(ppomq("keys", "generate", "--out", str(keys), "--actors", str(actors)),
                   check=True, capture_output=True)  # fmt: skip
    env = dict(os.environ, PPOMQ_RUN_ID=RUN_ID,
               PPOMQ_EVENTS_FILE=str(run_dir / EVENTS_FILE),
               PPOMQ_REDIS_URL=f"redis://127.0.0.1:{REDIS_PORT}/0")  # fmt: skip
    server_curve = ["--curve-server-cert", str(keys / "server.key_secret"),
                    "--curve-allowed-dir", str(keys / "allowed")]  # fmt: skip
    with open_lab(hosts_dir) as lab:
        lab.build({LEARNER_HOST: LEARNER_HOST, ACTOR_HOST: ACTOR_HOST})
        learner_addr = lab.addr[LEARNER_HOST]
        # Redis stays on the learner host's loopback: only the learner and the
        # weightserver use it.
        lab.start(LEARNER_HOST, ["redis-server", "--port", str(REDIS_PORT), "--bind",
                                 "127.0.0.1", "--save", "", "--appendonly", "no"],
                  env, cwd=run_dir, name="redis")  # fmt: skip
        ping = ["redis-cli", "-p", str(REDIS_PORT), "ping"]
        _wait("Redis", lambda: _ok(lab, LEARNER_HOST, ping, env), lab, 30)
        lab.start(LEARNER_HOST, ppomq(
            "weightserver", "--bind", f"tcp://{learner_addr}:{WEIGHTS_PORT}", *server_curve,
        ), env, cwd=run_dir, name="weightserver")  # fmt: skip
        lab.start(LEARNER_HOST, ppomq(
            "learner", "--rollout-bind", f"tcp://{learner_addr}:{ROLLOUT_PORT}", *server_curve,
            "--run-dir", str(run_dir), "--actors", str(actors), *learner_args,
        ), env, cwd=run_dir, name="learner")  # fmt: skip
        # The actors start at once: each waits for the first version by itself.
        for i in range(actors):
            lab.start(ACTOR_HOST, ppomq(
                "actor", "--actor-index", str(i),
                "--learner-addr", f"tcp://{learner_addr}:{ROLLOUT_PORT}",
                "--weightserver-addr", f"tcp://{learner_addr}:{WEIGHTS_PORT}",
                "--curve-actor-cert", str(keys / "actors" / f"actor-{i}.key_secret"),
                "--curve-server-public-cert", str(keys / "server.key"), *actor_args,
            ), env, cwd=run_dir, name=f"actor-{i}")  # fmt: skip
        services = [h for h in lab.procs if h != "redis"]
        deadline = time.monotonic() + timeout_s
        codes: dict[str, int] = {}
        while len(codes) < len(services):
            for host in services:
                code = lab.procs[host].poll()
                if code is not None and host not in codes:
                    codes[host] = code
                    if code != 0:
                        print(f"split_run: {host} exited {code}:\n{lab.log(host)}",
                              file=sys.stderr)  # fmt: skip
            if any(codes.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        lab.stop("redis", timeout=10)
    missing = [h for h in services if h not in codes]
    if missing:
        print(f"split_run: {', '.join(missing)} still running when stopped", file=sys.stderr)
        return 1
    return 0 if not any(codes.values()) else 1


def _ok(lab: Lab, host: str, argv: list[str], env: dict[str, str]) -> bool:
    try:
        return lab.run(host, argv, env, timeout=5).strip() == "PONG"
    except (RuntimeError, subprocess.TimeoutExpired):
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--actors", type=int, default=1, help="actor processes on the actor host")
    p.add_argument("--learner-args", default="", help="`ppomq learner` flags, one string")
    p.add_argument("--actor-args", default="", help="`ppomq actor` flags, one string")
    p.add_argument("--timeout-s", type=float, default=600.0)
    a = p.parse_args(argv)
    why = why_not_netns()
    if why:
        print(f"split_run: {why}", file=sys.stderr)
        return 2
    if a.run_dir.exists():
        print(f"split_run: {a.run_dir} exists; give a new run dir", file=sys.stderr)
        return 2
    return run(a.run_dir, shlex.split(a.learner_args), shlex.split(a.actor_args), a.actors,
               a.timeout_s)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
