"""Actor efficiency: an actor's SPS inside the running system over the same loop alone.

    .venv/bin/python -m benchmarks.actor_efficiency [--rounds 4] [--window-s 6] [--quick]

"Alone" is `EnvRunner.sample()` called back to back in a fresh process: the same env
factory, N, T, seeds and `InferencePolicy` as an actor, the weights of the system run just
before it, one torch thread, no sockets. "In the system" is actor 0 of a real
`ppomq train --actors 1` (embedded Redis, weightserver, learner, actor as processes), read
from the actor's own Prometheus counter (`ppomq_actor_env_steps_total`) over a steady
window that starts once the actor has been sending for `--warmup-s` seconds.

Two figures per configuration, because inside the system the actor also waits for weights
(flow control: at most `batches_per_version` batches per version):

* end-to-end ratio = actor SPS in the system / SPS alone (what a user gets);
* step-loop figures from a py-spy profile of the actor's main thread over a second window
  (`--nonblocking`, so the actor is never paused): the share of its wall time spent in
  `sample()`, and the speed of `sample()` while it runs (steps / time in sample) over the
  speed alone. The rest of the wall time is split into waiting for weights, loading them,
  encoding, sending. end-to-end ratio ~= in-sample share x in-sample speed ratio.

Configurations (all: CartPole-v1, N=8, T=32, async mode, 1 actor):
  default        the training defaults (batches_per_version=1, 20 epochs of 256-sample SGD)
  pipelined      batches_per_version=2: the actor samples its next batch while the learner
                 trains on the last one; 1 epoch, whole batch per SGD step, so that the
                 learner keeps up
  no-flow-control batches_per_version=0: the actor never waits for weights (the upper
                 bound of the actor shell; the staleness gate drops what the learner skips),
                 with batch_samples=N*T, one batch per update: actors that never wait need
                 a fixed update size, and one actor's batch is what the default per-actor
                 rule would give

Runs are interleaved (system, alone, system, alone ...) so that both see the same machine.
Writes benchmarks/results/actor_efficiency.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks import harness

CONFIGS: dict[str, list[str]] = {
    "default": [],
    "pipelined": ["--batches-per-version", "2", "--update-epochs", "1", "--minibatch-size", "0"],
    "no-flow-control": [
        "--batches-per-version", "0", "--update-epochs", "1", "--minibatch-size", "0",
    ],
}  # fmt: skip


# --------------------------------------------------------------------------------------
# A real `ppomq train`, started as a user starts it (shared with benchmarks.scaling)
# --------------------------------------------------------------------------------------


def free_port_block(count: int) -> int:
    """First of `count` consecutive free TCP ports (the metrics ports of one run)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError(f"no block of {count} free ports")


def child_env() -> dict[str, str]:
    """The caller's environment minus PPOMQ_* (the flags say everything), with the repo on
    PYTHONPATH so that actors can import `benchmarks.envs` for the synthetic env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(harness.REPO), env.get("PYTHONPATH")) if p)
    return env


@dataclass
class SystemRun:
    """`ppomq train` in a subprocess, plus read access to what it reports in Redis."""

    run_dir: Path
    flags: list[str]
    metrics_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _redis: Any = field(default=None, repr=False)
    _keys: Any = field(default=None, repr=False)

    def start(self, *, max_duration_s: float) -> None:
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable, "-m", "ppomq.cli", "train", *self.flags,
            "--run-dir", str(self.run_dir), "--no-progress", "--eval-episodes", "0",
            "--total-steps", "0", "--duration-s", str(max_duration_s),
        ]  # fmt: skip
        if self.metrics_port:
            args += ["--metrics-port", str(self.metrics_port)]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.run_dir / "train.out", "wb")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            args, cwd=harness.REPO, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()

    def _connect(self, timeout_s: float) -> None:
        import redis

        from ppomq.core.store.keys import RunKeys

        deadline = time.monotonic() + timeout_s
        path = self.run_dir / "settings.json"
        while not path.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path} did not appear; see {self.run_dir}/train.out")
            time.sleep(0.05)
        settings = json.loads(path.read_text())
        self._redis = redis.Redis.from_url(settings["redis_url"])
        self._keys = RunKeys(settings["run_id"])

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            out = (self.run_dir / "train.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"ppomq train exited with {self.proc.returncode}:\n{out}")

    def learner_status(self) -> dict[str, Any] | None:
        """The learner's last status (written after every update), or None before one."""
        raw = self._redis.get(self._keys.stats)
        return None if raw is None else json.loads(raw)

    def actor_table(self) -> dict[str, dict[str, Any]]:
        """Per actor: batches and env steps the learner has taken from it."""
        return {
            k.decode(): json.loads(v) for k, v in self._redis.hgetall(self._keys.actors).items()
        }

    def wait_until_producing(self, actors: int, *, min_batches: int, timeout_s: float) -> None:
        """Until every one of `actors` actors has delivered `min_batches` batches."""
        if self._redis is None:
            self._connect(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            try:
                table = self.actor_table()
            except Exception:  # Redis starting up
                table = {}
            if len(table) >= actors and all(a["batches"] >= min_batches for a in table.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"only {len(table)}/{actors} actors producing after {timeout_s:.0f} s; "
                    f"see {self.run_dir}/logs"
                )
            time.sleep(0.1)

    def fresh_status(self, after_unix: float, timeout_s: float = 10.0) -> dict[str, Any]:
        """The first learner status written after `after_unix` (one per update)."""
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.learner_status()
            if st is not None and st["updated_at"] > after_unix:
                return st
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("the learner did not update in time")
            time.sleep(0.01)

    def pids(self) -> dict[str, int]:
        """Process name (redis, weightserver, learner, actor-i) -> pid."""
        import psutil

        assert self.proc is not None
        out: dict[str, int] = {}
        actors = 0
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                # Re-split: `ppomq train`'s forked children are retitled with
                # setproctitle, which shows the command line as one argument.
                cmd = " ".join(child.cmdline()).split()
            except psutil.Error:
                continue
            if any("redis-server" in c for c in cmd):
                out["redis"] = child.pid
            elif cmd[-1:] in (["weightserver"], ["learner"]):
                out[cmd[-1]] = child.pid
            elif cmd[-1:] == ["actor"]:
                out[f"actor-{actors}"] = child.pid
                actors += 1
        return out

    def stop(self, timeout_s: float = 60.0) -> dict[str, Any] | None:
        """Warm stop; returns summary.json when the learner wrote one.

        SIGTERM, which `ppomq train` treats as Ctrl-C, rather than SIGINT itself: a
        benchmark started in the background (`cmd &`, nohup) hands its children SIGINT
        ignored, and Python then never turns it into KeyboardInterrupt.
        """
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                print(f"  {self.run_dir.name}: no warm stop in {timeout_s:.0f} s; killing",
                      flush=True)  # fmt: skip
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self._redis is not None:
            self._redis.close()
        path = self.run_dir / "summary.json"
        return json.loads(path.read_text()) if path.exists() else None


def cpu_seconds(pids: Mapping[str, int]) -> dict[str, float]:
    """user+system CPU seconds so far of each process (gone ones are left out)."""
    import psutil

    out = {}
    for name, pid in pids.items():
        try:
            t = psutil.Process(pid).cpu_times()
            out[name] = t.user + t.system
        except psutil.Error:
            pass
    return out


def cpu_share(before: Mapping[str, float], after: Mapping[str, float], wall: float) -> dict:
    """Cores used per process over a window (1.0 = one core busy all the time)."""
    return {k: round((after[k] - before[k]) / wall, 3) for k in after if k in before}


# --------------------------------------------------------------------------------------
# The loop alone
# --------------------------------------------------------------------------------------


def standalone_worker(conn: Connection, cfg: dict[str, Any]) -> None:
    """In a fresh process: build what an actor builds, call sample() back to back."""
    import torch

    from ppomq.actor.runner import EnvRunner
    from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
    from ppomq.core.evaluate import load_weights_file
    from ppomq.core.models import build_model, model_spec_for

    torch.set_num_threads(1)  # as run_actor does
    n, t, env_id = cfg["num_envs"], cfg["num_steps"], cfg["env_id"]
    spec = rollout_spec_for(env_id, run_id="bench", num_steps=t, max_bytes=256 << 20)
    # Actor index 0's seeds, as actor 0 of the system run uses.
    envs = make_vector_env(env_id, n, [env_seed(cfg["seed"], 0, i) for i in range(n)])
    runner = EnvRunner(envs=envs, spec=spec, run_id="bench", actor_id="alone", env_id=env_id)
    if cfg.get("weights"):
        policy, _ = load_weights_file(cfg["weights"])
    else:
        policy = build_model(model_spec_for(spec, hidden=[64, 64]))
    inference = policy.inference()
    seq = 0
    end_warmup = time.perf_counter() + cfg["warmup_s"]
    while time.perf_counter() < end_warmup:
        runner.sample(inference, policy_version=0, seq=seq)
        seq += 1
    t0, steps = time.perf_counter(), 0
    c0 = time.process_time()
    while time.perf_counter() - t0 < cfg["window_s"]:
        runner.sample(inference, policy_version=0, seq=seq)
        seq += 1
        steps += n * t
    wall = time.perf_counter() - t0
    envs.close()
    conn.send({"sps": steps / wall, "steps": steps, "wall_s": wall,
               "cpu_cores": (time.process_time() - c0) / wall})  # fmt: skip


def run_standalone(cfg: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")  # a fresh interpreter, as an actor process is
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=standalone_worker, args=(child, cfg))
    proc.start()
    child.close()
    try:
        result = parent.recv()
    finally:
        proc.join(timeout=30)
    return result


# --------------------------------------------------------------------------------------
# py-spy: where the actor's main thread spends its wall time
# --------------------------------------------------------------------------------------

# Categories of a main-thread sample, by the innermost frame of interest on its stack
# (function name, file suffix). First match from the leaf wins. Weights are fetched and
# loaded on the actor's background thread (actor/policy_sync.py); the main thread only waits
# in `refresh_weights` when flow control makes it.
_CATEGORIES: Sequence[tuple[str, str, str]] = (
    ("sample: env step", "step", "vector/sync_vector_env.py"),
    ("sample: policy", "act", "ppomq/models/mlp.py"),
    ("sample: policy", "value", "ppomq/models/mlp.py"),
    ("sample: policy", "sample", "ppomq/models/distributions.py"),
    ("sample: runner", "sample", "actor/runner.py"),
    ("weights: wait/fetch", "refresh_weights", "actor/policy_sync.py"),
    ("encode", "encode", "proto/rollout_encode.py"),
    ("send", "send", "ppomq/transport.py"),
)
_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^():]+)(?::\d+)?\)$")


def classify_stack(frames: Sequence[str]) -> str:
    """The category of one sampled stack (root first, as py-spy writes it)."""
    for frame in reversed(frames):
        m = _FRAME.match(frame)
        if m is None:
            continue
        func = m["func"].rsplit(".", 1)[-1]
        path = m["file"].replace("\\", "/")
        for category, name, suffix in _CATEGORIES:
            if func == name and path.endswith(suffix):
                return category
    return "other"


def parse_raw_profile(text: str, thread: str = "MainThread") -> Counter[str]:
    """Samples per category for one thread of a `py-spy record --format raw --threads` file."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        if not frames or not frames[0].endswith(f": {thread}"):
            continue
        counts[classify_stack(frames[1:])] += int(n)
    return counts


def py_spy() -> str | None:
    """The py-spy next to this interpreter, else on PATH (it is not a dependency)."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def profile_actor(pid: int, duration_s: float, out: Path, rate: int = 200) -> str | None:
    """Raw collapsed stacks of `pid` over `duration_s`, idle samples included; None if
    py-spy is missing or may not attach (ptrace)."""
    exe = py_spy()
    if exe is None:
        return None
    cmd = [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))),
           "--rate", str(rate), "--idle", "--nonblocking", "--threads", "--format", "raw",
           "-o", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60)
    if done.returncode != 0 or not out.exists():
        print(f"  py-spy failed ({done.returncode}): {done.stderr.strip()[-300:]}", flush=True)
        return None
    return out.read_text()


# --------------------------------------------------------------------------------------
# One system measurement
# --------------------------------------------------------------------------------------


def actor_counter(port: int) -> float:
    """ppomq_actor_env_steps_total from the actor's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(r"^ppomq_actor_env_steps_total (\S+)$", text, re.M)
    if m is None:
        raise RuntimeError("ppomq_actor_env_steps_total not found on the actor's /metrics")
    return float(m[1])


def measure_system(
    config: str, flags: list[str], args: argparse.Namespace, workdir: Path, rnd: int
) -> dict[str, Any]:
    base = free_port_block(3)  # learner, weightserver, actor 0
    if "--batches-per-version" in flags and flags[flags.index("--batches-per-version") + 1] == "0":
        # An actor that never waits needs a fixed update size: one batch (see the docstring).
        flags = [*flags, "--batch-samples", str(args.num_envs * args.num_steps)]
    run = SystemRun(
        workdir / f"{config}-r{rnd}",
        ["--actors", "1", "--env-id", args.env_id, "--num-envs", str(args.num_envs),
         "--num-steps", str(args.num_steps), "--seed", str(args.seed), *flags],
        metrics_port=base,
    )  # fmt: skip
    budget = 120 + args.warmup_s + 2 * args.window_s
    run.start(max_duration_s=budget)
    try:
        run.wait_until_producing(1, min_batches=1, timeout_s=120)
        time.sleep(args.warmup_s)  # start-up excluded: imports, first weights, JIT warm-up
        pids = run.pids()
        port = base + 2
        # Window 1: the actor's own counter, nothing attached.
        c0, t0, cpu0 = actor_counter(port), time.monotonic(), cpu_seconds(pids)
        time.sleep(args.window_s)
        c1, t1, cpu1 = actor_counter(port), time.monotonic(), cpu_seconds(pids)
        result: dict[str, Any] = {
            "config": config,
            "flags": flags,
            "round": rnd,
            "sps": (c1 - c0) / (t1 - t0),
            "window_s": t1 - t0,
            "env_steps_in_window": c1 - c0,
            "cpu_cores": cpu_share(cpu0, cpu1, t1 - t0),
        }
        # Window 2: py-spy on the actor's main thread, without pausing it.
        if not args.no_profile:
            raw_path = run.run_dir / "actor-profile.txt"
            p0, tp0 = actor_counter(port), time.monotonic()
            text = profile_actor(pids["actor-0"], args.window_s, raw_path)
            p1, tp1 = actor_counter(port), time.monotonic()
            if text is not None:
                counts = parse_raw_profile(text)
                total = sum(counts.values())
                shares = {k: v / total for k, v in sorted(counts.items())} if total else {}
                in_sample = sum(v for k, v in shares.items() if k.startswith("sample"))
                result["profile"] = {
                    "samples": total,
                    "shares": shares,
                    "in_sample_share": in_sample,
                    "sps_while_profiled": (p1 - p0) / (tp1 - tp0),
                    # Speed of the step loop while it runs: steps over time inside sample().
                    "in_sample_sps": (p1 - p0) / (in_sample * (tp1 - tp0)) if in_sample else None,
                    "raw_file": str(raw_path),
                }
    finally:
        summary = run.stop()
    if summary is not None:
        result["learner"] = {
            k: summary.get(k)
            for k in ("versions", "batches_produced", "batches_accepted", "batches_rejected",
                      "waste_ratio", "learner_time_s", "sps", "wall_seconds")
        }  # fmt: skip
    result["weights"] = str(run.run_dir / "final_weights.pt")
    return result


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def _span(xs: Sequence[float | None], fmt: str) -> str:
    vals = [x for x in xs if x is not None]
    if not vals:
        return "n/a"
    med, lo, hi = (format(v, fmt) for v in (statistics.median(vals), min(vals), max(vals)))
    return f"{med} ({lo}–{hi})"


def summarize(runs: list[dict[str, Any]], alone: list[dict[str, Any]]) -> dict[str, Any]:
    """Per configuration: medians over rounds of each figure and of the ratios, each
    ratio against the standalone run measured right after that system run."""
    out: dict[str, Any] = {}
    for config in dict.fromkeys(r["config"] for r in runs):
        rows = [(r, a) for r, a in zip(runs, alone, strict=True) if r["config"] == config]
        e2e = [r["sps"] / a["sps"] for r, a in rows]
        prof = [r.get("profile") or {} for r, _ in rows]
        in_sample_ratio = [
            (p["in_sample_sps"] / a["sps"]) if p.get("in_sample_sps") else None
            for p, (_, a) in zip(prof, rows, strict=True)
        ]
        shares: dict[str, list[float]] = {}
        for p in prof:
            for k, v in p.get("shares", {}).items():
                shares.setdefault(k, []).append(v)
        out[config] = {
            "rounds": len(rows),
            "system_sps": harness.median([r["sps"] for r, _ in rows]),
            "alone_sps": harness.median([a["sps"] for _, a in rows]),
            "end_to_end_ratio": harness.median(e2e),
            "end_to_end_ratio_min_max": [min(e2e), max(e2e)],
            "in_sample_share": harness.median([p.get("in_sample_share") for p in prof]),
            "in_sample_speed_ratio": harness.median(in_sample_ratio),
            "wall_time_shares": {k: harness.median(v) for k, v in sorted(shares.items())},
            "actor_cpu_cores": harness.median([r["cpu_cores"].get("actor-0") for r, _ in rows]),
            "learner_cpu_cores": harness.median([r["cpu_cores"].get("learner") for r, _ in rows]),
            "waste_ratio": harness.median(
                [(r.get("learner") or {}).get("waste_ratio") for r, _ in rows]
            ),
        }
    return out


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    lines = [
        "# Actor efficiency",
        "",
        f"`{m['command']}` on {harness.machine_line(m['machine'])}, {m['env_id']}, "
        f"N={m['num_envs']}, T={m['num_steps']}, 1 actor, {m['rounds']} interleaved rounds "
        f"of {m['window_s']:g} s windows after {m['warmup_s']:g} s of warm-up; "
        "median (min–max). Alone = `EnvRunner.sample()` back to back in a fresh process "
        "with the system run's final weights; in the system = the actor's "
        "`ppomq_actor_env_steps_total` counter.",
        "",
        "| config | flags | alone SPS | in-system SPS | end-to-end ratio | time in sample() "
        "| sample() speed vs alone | waste | actor / learner CPU (cores) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in doc["summary"].items():
        rows = [r for r in doc["system_runs"] if r["config"] == name]
        pairs = [(r, a) for r, a in zip(doc["system_runs"], doc["alone_runs"], strict=True)
                 if r["config"] == name]  # fmt: skip
        e2e = [r["sps"] / a["sps"] for r, a in pairs]
        share, speed, waste = s["in_sample_share"], s["in_sample_speed_ratio"], s["waste_ratio"]
        flags = " ".join(rows[0]["flags"]) or "(defaults)"
        lines.append(
            f"| {name} | `{flags}` | {_span([a['sps'] for _, a in pairs], ',.0f')} "
            f"| {_span([r['sps'] for r in rows], ',.0f')} | **{_span(e2e, '.2f')}** "
            f"| {'n/a' if share is None else f'{share:.0%}'} "
            f"| {'n/a' if speed is None else f'{speed:.2f}'} "
            f"| {'n/a' if waste is None else f'{waste:.0%}'} "
            f"| {s['actor_cpu_cores']:.2f} / {s['learner_cpu_cores']:.2f} |"
        )
    lines += [
        "",
        "Where the actor's main thread spends its wall time (py-spy, `--idle --nonblocking`, "
        "median share of samples):",
        "",
    ]
    cats = sorted({k for s in doc["summary"].values() for k in s["wall_time_shares"]})
    names = list(doc["summary"])
    lines.append("| | " + " | ".join(names) + " |")
    lines.append("|---|" + "---:|" * len(names))
    for c in cats:
        cells = []
        for n in names:
            v = doc["summary"][n]["wall_time_shares"].get(c)
            cells.append("" if v is None else f"{v:.1%}")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--window-s", type=float, default=6.0)
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy window")
    p.add_argument("--quick", action="store_true", help="1 round, 2 s windows (smoke test)")
    p.add_argument("--out", type=Path, default=harness.RESULTS, help="where to write the results")
    p.add_argument("--workdir", type=Path, default=None, help="run dirs (default: a temp dir)")
    harness.add_lock_option(p)
    args = p.parse_args(argv)
    bench_run = harness.Run("actor_efficiency", argv)
    if args.quick:
        args.rounds, args.window_s, args.warmup_s = 1, 2.0, 1.0
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown config(s) {unknown}; choose from {list(CONFIGS)}")
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ppomq-actor-eff-")
        args.workdir = Path(tmp.name)

    def run(config: str, rnd: int) -> tuple[dict[str, Any], dict[str, Any]]:
        r = measure_system(config, CONFIGS[config], args, args.workdir, rnd)
        a = run_standalone(
            {"env_id": args.env_id, "num_envs": args.num_envs,
             "num_steps": args.num_steps, "seed": args.seed,
             "warmup_s": min(args.warmup_s, 2.0), "window_s": args.window_s,
             "weights": r["weights"] if Path(r["weights"]).exists() else None}
        )  # fmt: skip
        share = (r.get("profile") or {}).get("in_sample_share")
        print(
            f"round {rnd} {config:>16}: system {r['sps']:8,.0f} SPS, alone "
            f"{a['sps']:8,.0f} SPS, ratio {r['sps'] / a['sps']:.2f}, in sample() "
            f"{'n/a' if share is None else f'{share:.0%}'}",
            flush=True,
        )
        return r, a

    try:
        by_config = harness.interleave(configs, args.rounds, run, order="fixed", lock=args.lock)
    finally:
        if tmp is not None:
            tmp.cleanup()
    runs = [r for pairs in by_config.values() for r, _ in pairs]
    alone = [a for pairs in by_config.values() for _, a in pairs]
    for r in runs:
        r.pop("weights", None)
        (r.get("profile") or {}).pop("raw_file", None)
    doc = {
        "meta": {
            "command": harness.command_line("actor_efficiency", argv),
            "machine": harness.machine(),
            "date": harness.utc_now(),
            "env_id": args.env_id,
            "num_envs": args.num_envs,
            "num_steps": args.num_steps,
            "rounds": args.rounds,
            "window_s": args.window_s,
            "warmup_s": args.warmup_s,
            "profiled": not args.no_profile and py_spy() is not None,
        },
        "summary": summarize(runs, alone),
        "system_runs": runs,
        "alone_runs": alone,
    }
    print(harness.write_results(args.out, "actor_efficiency", doc, markdown(doc), bench_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
