"""N actor hosts against one learner, each service on its own network host, with exactly
the environment of docker-compose.yml or of the rendered k8s overlay (service_env.py).

Hosts are network namespaces (benchmarks.deploy.netns.Lab): `redis`, `weightserver`, `learner` and
`actor-1` … `actor-N`, each with its own address; /etc/netns/HOST/hosts maps the service
names as Compose's DNS and Kubernetes' Services would (`redis`, `weightserver`,
`learner`), so no address in any env is changed. What a run here changes, and nothing
else: the env id (an env whose step is I/O-bound, benchmarks/envs.py's SleepEnv, so that
eight actor hosts are not capped by this machine's two cores), the mode (async, or sync),
and the run length (no total-step end, no final evaluation: the run is stopped once it
has been measured). The processes also get the image's ENV, PATH/HOME/TMPDIR for their
host's folders, PYTHONPATH (the repo, where the env's module lives; an image would carry
it) and the env's step time (BENCH_SLEEP_STEP_S).

`measure()` starts Redis, then the weightserver, then the learner, each once the one
before passes its compose healthcheck, then the N actor hosts at once; waits until every
actor host has delivered batches to the learner, then for `updates` further updates of
the learner (progress.csv), and reads off that steady window: samples per update, waste
(batches rejected / taken off the queue), env steps/s and trained samples/s, and the
batches each actor host delivered; then a warm stop and the whole run's summary.json.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.deploy.composefile import REPO
from benchmarks.deploy.netns import (
    STOPPED_BY_SIGTERM,
    Host,
    Lab,
    start_order,
    wait_healthy,
    why_not_netns,
)
from benchmarks.deploy.service_env import OVERRIDABLE, PPOMQ_SERVICES, diff_env, services_from
from benchmarks.envs import SLEEP_ENV_SPEC, STEP_S_VAR

STEP_S = 0.002  # SleepEnv's step: 2 ms, almost no CPU
# Service -> the env names a run here may change in it.
OVERRIDES_OF = {s: {k for k, v in OVERRIDABLE.items() if s in v} for s in PPOMQ_SERVICES}


def overrides(mode: str) -> dict[str, str]:
    return {
        "PPOMQ_ENV_ID": SLEEP_ENV_SPEC,
        "PPOMQ_MODE": mode,
        "PPOMQ_TOTAL_STEPS": "0",  # stopped once measured
        "PPOMQ_EVAL_EPISODES": "0",
    }


def why_not() -> str | None:
    return why_not_netns()


class ScaledTopology:
    def __init__(self, lab: Lab, root: Path, source: str, actors: int, mode: str) -> None:
        self.lab, self.source, self.n, self.mode = lab, source, actors, mode
        self.services = services_from(source, overrides(mode))
        # The env each service would get from its source with no change at all: what the
        # processes get may differ from it in the overridden names only.
        self.pristine = services_from(source, {})
        self.host_service = {
            "keys": "keys", "redis": "redis", "weightserver": "weightserver", "learner": "learner"
        }  # fmt: skip
        self.host_service |= {f"actor-{i}": "actor" for i in range(1, actors + 1)}
        lab.build(self.host_service)
        self.hosts = {h: Host(h, self.services[s], root) for h, s in self.host_service.items()}
        for host in self.hosts.values():
            host.env |= {"PYTHONPATH": str(REPO), STEP_S_VAR: str(STEP_S)}
        learner = self.hosts["learner"]
        self.run_id = learner.env["PPOMQ_RUN_ID"]
        run_dir = learner.env.get("PPOMQ_RUN_DIR")  # unset on k8s: runs/RUN_ID in WORKDIR
        self.run_dir = Path(run_dir) if run_dir else learner.workdir / "runs" / self.run_id
        redis = self.hosts["redis"]
        self._cli = ["redis-cli", "--no-auth-warning", "--user", "ppomq-reader"]
        self._cli_env = redis.env | {"REDISCLI_AUTH": redis.env["REDIS_READER_PASSWORD"]}

    def env_changes(self) -> dict[str, dict[str, Any]]:
        """Per ppomq service: the names whose value differs from its source's own env."""
        return {
            s: diff_env(self.pristine[s]["environment"], self.services[s]["environment"])
            for s in PPOMQ_SERVICES
        }

    def start(self) -> None:
        healthy: set[str] = set()
        for service in start_order(self.services):
            for dep, cond in self.services[service].get("depends_on", {}).items():
                if cond["condition"] == "service_completed_successfully":
                    continue  # the keys job: run to its end already (start_order)
                # Healthy, even where the file says started: the window measured starts
                # with every actor up, not with their start-up races.
                for name, svc in self.host_service.items():
                    if svc == dep and name not in healthy:
                        wait_healthy(self.lab, self.hosts[name], timeout_s=120)
                        healthy.add(name)
            for name, svc in self.host_service.items():
                if svc != service:
                    continue
                h = self.hosts[name]
                if service == "keys":  # a job: run to its end (exit 0) before its dependents
                    self.lab.run(name, h.argv, h.env, timeout=60)
                else:
                    self.lab.start(name, h.argv, h.env, cwd=h.workdir)

    def actor_hosts(self) -> list[str]:
        return [h for h, s in self.host_service.items() if s == "actor"]

    def actor_entries(self) -> dict[str, dict]:
        key = f"ppomq:{self.run_id}:actors"
        out = self.lab.run("redis", [*self._cli, "HGETALL", key], self._cli_env).strip()
        flat = out.splitlines()
        return {k: json.loads(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}

    def batches_by_host(self) -> dict[str, int]:
        """Actor host -> batches the learner trained on from it (ids are a{i}-{pid}-{hex}).
        Trained on, not received: an actor beyond PPOMQ_ACTORS joins a sync quorum with its
        first batch that makes an update (made-up ids must not hold one up), so a host
        counts once it is one the updates wait for."""
        pids = {str(self.lab.procs[h].pid): h for h in self.actor_hosts()}
        out: dict[str, int] = {}
        for actor_id, entry in self.actor_entries().items():
            host = pids.get(actor_id.split("-")[1])
            accepted = int(entry.get("accepted", 0))
            if host is not None and accepted:
                out[host] = out.get(host, 0) + accepted
        return out

    def progress(self) -> list[dict[str, str]]:
        path = self.run_dir / "progress.csv"
        if not path.exists():
            return []
        with open(path, newline="") as fh:
            return [r for r in csv.DictReader(fh) if r.get("version")]

    def logs(self, tail: int = 1500) -> str:
        return "\n".join(f"--- {h}\n{self.lab.log(h, tail)}" for h in self.host_service)


def _poll(top: ScaledTopology, done, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        top.lab.check_alive()
        if time.monotonic() > deadline:
            rows = top.progress()
            raise AssertionError(
                f"timed out after {timeout_s:.0f} s waiting for {what}; last progress row "
                f"{rows[-1] if rows else None}\n" + top.logs()
            )
        time.sleep(0.5)


def measure(
    lab: Lab,
    root: Path,
    *,
    source: str,
    actors: int,
    mode: str,
    updates: int,
    start_timeout_s: float = 180.0,
) -> dict[str, Any]:
    """One run of `actors` actor hosts; the steady window's figures and the summary's."""
    top = ScaledTopology(lab, root, source, actors, mode)
    t0 = time.monotonic()
    top.start()
    hosts = set(top.actor_hosts())
    _poll(top, lambda: set(top.batches_by_host()) == hosts, start_timeout_s,
          f"all {actors} actor hosts delivering")  # fmt: skip
    startup_s = time.monotonic() - t0
    # Every host has delivered: the next update may still be one formed before the last
    # one arrived, so the window opens one update later.
    rows0 = top.progress()
    v_open = int(rows0[-1]["version"]) + 1 if rows0 else 1
    by_host0 = top.batches_by_host()
    _poll(top, lambda: sum(int(r["version"]) > v_open for r in top.progress()) >= updates,
          max(60.0, 10.0 * updates), f"{updates} updates after v{v_open}")  # fmt: skip
    by_host1 = top.batches_by_host()
    rows = top.progress()
    load1 = os.getloadavg()[0]
    for host in top.actor_hosts():
        assert lab.stop(host, timeout=30) == STOPPED_BY_SIGTERM, lab.log(host)
    assert lab.stop("learner", timeout=120) == STOPPED_BY_SIGTERM, lab.log("learner")
    summary = json.loads((top.run_dir / "summary.json").read_text())

    base = next(r for r in rows if int(r["version"]) == v_open)
    window = [r for r in rows if int(r["version"]) > v_open][:updates]
    last = window[-1]
    span = float(last["wall_s"]) - float(base["wall_s"])
    samples = [int(float(r["charts/samples"])) for r in window]
    accepted = int(last["charts/batches_accepted"]) - int(base["charts/batches_accepted"])
    rejected = int(last["charts/batches_rejected"]) - int(base["charts/batches_rejected"])
    learner = top.hosts["learner"].env
    batch = int(learner["PPOMQ_NUM_ENVS"]) * int(learner["PPOMQ_NUM_STEPS"])
    return {
        "source": source,
        "mode": mode,
        "actors": actors,
        "actor_batch_samples": batch,
        "env_changes": top.env_changes(),
        "startup_s": round(startup_s, 1),
        "window": {"from_version": v_open, "updates": len(window), "seconds": round(span, 3)},
        "samples_per_update": samples,
        "samples_per_update_median": statistics.median(samples),
        "env_steps_per_s": (int(last["env_steps"]) - int(base["env_steps"])) / span,
        "trained_samples_per_s": sum(samples) / span,
        "updates_per_s": len(window) / span,
        # Mean seconds per update in each learner phase: waiting for batches, then training.
        "learner_s_per_update": {
            p: round(statistics.fmean(float(r[f"time/learner_{p}"] or 0) for r in window), 4)
            for p in ("wait", "targets", "sgd", "publish")
        },
        "window_batches_accepted": accepted,
        "window_batches_rejected": rejected,
        "window_waste": rejected / max(accepted + rejected, 1),
        "batches_by_host_in_window": {
            h: by_host1.get(h, 0) - by_host0.get(h, 0) for h in sorted(by_host1)
        },
        "run_waste_ratio": summary["waste_ratio"],
        "run_batches_produced": summary["batches_produced"],
        "run_batches_rejected": summary["batches_rejected"],
        "load_avg_1m_at_end": round(load1, 2),
    }
