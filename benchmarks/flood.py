"""Learner updates per second under a flood of junk or of valid batches, CURVE off and on.

    .venv/bin/python -m benchmarks.flood --lock /tmp/ppomq-bench.lock [--rounds 3]

A real `ppomq weightserver`, `ppomq learner` and two `ppomq actor` processes train CartPole
on loopback (tests/ops/test_flood.py's flags). Once the learner is past version 25, three
windows of `--window-s` seconds each, in an order that rotates round by round:

- unharmed: nothing else runs;
- control: a helper process burns one CPU core in a busy loop and sends nothing: what the
  learner and actors lose to a flooder's core alone, on a machine with few cores;
- flood: the same helper sends, as fast as it can, a cycle of 2,000 hostile messages (the
  mix of tests/ops/test_flood.py: malformed ones from benchmarks/messages/badmsgs.py, stale batches
  under its own id, spoofs under an honest actor's id with seq 2^64-1), from a client
  holding a valid, allowed key under CURVE. Sends block on the high-water mark, so its rate
  is what one process can send or the learner will read, whichever is lower;
- valid-flood: the same helper sends, as fast as it can, well-formed batches under one id
  of its own, each stamped with the learner's current version (Redis `latest`, read every
  few milliseconds) and the next seq: what any peer on the rollout socket could send (under
  CURVE, any holder of an allowed key). The learner trains on at most the id's grant per
  version; the rest should cost it a header read.

Updates per second = versions published in the window / its length (Redis `latest`).
Honest batches per second = the two actors' accepted batches between the learner's last
status writes before the window's start and end (their rows in its actors hash, written with
the time in one transaction) / the time between those writes; for valid-flood, the
flooder's accepted and surplus batches in the window too. Each round starts a fresh
system, under an exclusive flock of `--lock` (the machine's other measured runs take the
same lock); the figure per mode is the median over the rounds. Writes
benchmarks/results/flood.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import redis

from benchmarks import harness
from benchmarks.messages.badmsgs import Generator, RngSource
from benchmarks.messages.factory import make_batch, whole_episodes
from ppomq.core.envs import rollout_spec_for
from ppomq.core.store.embedded import EmbeddedRedis, free_port
from ppomq.core.store.keys import RunKeys
from ppomq.core.transport.curvezmq import client_from_settings, key_suffix
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.proto import Reason, encode

PPOMQ = [sys.executable, "-m", "ppomq.cli"]
ROLLOUT = ["--num-envs", "4", "--num-steps", "32"]  # tests/ops/services.py's
LEARNER_SMALL = ["--update-epochs", "4", "--minibatch-size", "128", "--eval-episodes", "0"]
T, N = 32, 4
STALENESS = 20
MAX_MESSAGE = 2 << 20
CYCLE = 2_000  # distinct hostile messages the flooder cycles through
WARM_VERSION = 25
MODES = ("unharmed", "control", "flood", "valid-flood")
FLOODER = "flooder"  # the helper's actor id (under CURVE, with its key's suffix)
LATEST_EVERY_S = 0.005  # how often the valid flooder reads the learner's version
RUN_ID = "flood-bench"


# -- the helper process: a busy loop (control) or a flooder ---------------------------


def _messages(victim: str, own_id: str) -> list[list[Any]]:
    spec = rollout_spec_for("CartPole-v1", run_id=RUN_ID, num_steps=T, max_bytes=MAX_MESSAGE)
    gen = Generator(spec, np.random.default_rng(17))
    src = RngSource(np.random.default_rng(1717))
    out: list[list[Any]] = []
    while len(out) < CYCLE * 65 // 100:
        frames, reason, _ = gen.make(src)
        if reason is None or reason is Reason.SEQ_NOT_INCREASING:
            continue
        if max(len(f) for f in frames) > MAX_MESSAGE:  # ZeroMQ would drop the connection
            continue
        out.append(frames)
    rng = np.random.default_rng(0)
    base = dataclasses.replace(make_batch(spec, rng, actor_id=own_id, n=N), policy_version=0)
    out += [encode(dataclasses.replace(base, seq=i)) for i in range(CYCLE * 30 // 100)]
    spoof = encode(dataclasses.replace(base, actor_id=victim))
    header = msgpack.unpackb(spoof[0], raw=False)
    header["seq"] = 2**64 - 1  # beyond what encode packs (tests/ops/test_forged_batches.py)
    spoof = [msgpack.packb(header, use_bin_type=True), *spoof[1:]]
    out += [spoof] * (CYCLE - len(out))
    order = np.random.default_rng(1).permutation(len(out))
    return [out[i] for i in order]


def _valid_batch(own_id: str) -> tuple[dict[str, Any], list[Any]]:
    """A well-formed batch under `own_id`: its header (to restamp) and its other frames."""
    spec = rollout_spec_for("CartPole-v1", run_id=RUN_ID, num_steps=T, max_bytes=MAX_MESSAGE)
    batch = whole_episodes(make_batch(spec, np.random.default_rng(3), actor_id=own_id, n=N))
    frames = encode(batch)
    return msgpack.unpackb(frames[0], raw=False), frames[1:]


def _valid_flood(
    sender: RolloutSender, own_id: str, redis_url: str, deadline: float
) -> tuple[int, int]:
    """Send valid batches under `own_id` at the learner's current version until `deadline`;
    returns (sent, sends that blocked 100 ms)."""
    header, rest = _valid_batch(own_id)
    r = redis.Redis.from_url(redis_url, socket_timeout=5)
    latest_key = RunKeys(RUN_ID).latest
    sent = blocked = 0
    seq, read_at = 1, 0.0
    try:
        while (now := time.monotonic()) < deadline:
            if now - read_at >= LATEST_EVERY_S:
                header["policy_version"] = int(r.get(latest_key) or 0)
                read_at = now
            header["seq"] = seq
            if sender.send([msgpack.packb(header, use_bin_type=True), *rest], timeout_ms=100):
                sent += 1
                seq += 1
            else:
                blocked += 1
    finally:
        r.close()
    return sent, blocked


def helper(
    conn: Connection, mode: str, addr: str, victim: str, keys: str | None, redis_url: str
) -> None:
    """Prepare, say ready, wait for go, then busy-loop or flood until told the deadline."""
    curve = None
    own_id = FLOODER
    if keys is not None:
        k = Path(keys)
        curve = client_from_settings(
            type("S", (), {"curve_actor_cert": str(k / "actors" / "actor-2.key_secret"),
                           "curve_server_public_cert": str(k / "server.key")})()
        )  # fmt: skip
        text = (k / "actors" / "actor-2.key").read_text()
        own_id += key_suffix(text.split('public-key = "')[1].split('"')[0])
    messages = _messages(victim, own_id) if mode == "flood" else []
    sender = RolloutSender(addr, curve=curve) if mode in ("flood", "valid-flood") else None
    conn.send("ready")
    duration = conn.recv()
    cpu0, t0 = time.process_time(), time.monotonic()
    deadline = t0 + duration
    sent = blocked = 0
    if sender is not None and mode == "valid-flood":
        sent, blocked = _valid_flood(sender, own_id, redis_url, deadline)
        sender.close()
    elif sender is None:
        x = 0
        while time.monotonic() < deadline:
            for _ in range(10_000):
                x += 1
    else:
        i, n = 0, len(messages)
        while time.monotonic() < deadline:
            if sender.send(messages[i], timeout_ms=100):
                sent += 1
                i = i + 1 if i + 1 < n else 0
            else:
                blocked += 1
        sender.close()
    wall = time.monotonic() - t0
    conn.send({"sent": sent, "blocked_100ms": blocked, "wall_s": wall,
               "cpu_s": time.process_time() - cpu0})  # fmt: skip


# -- one system ------------------------------------------------------------------------


class System:
    def __init__(self, root: Path, redis_url: str, keys: Path | None) -> None:
        self.root, self.keys, self.redis_url = root, keys, redis_url
        self.rollout = f"tcp://127.0.0.1:{free_port()}"
        weights = f"tcp://127.0.0.1:{free_port()}"
        common = ["--redis-url", redis_url, "--run-id", RUN_ID]
        server: list[str] = []
        if keys is not None:
            server = ["--curve-server-cert", str(keys / "server.key_secret"),
                      "--curve-allowed-dir", str(keys / "allowed")]  # fmt: skip
        self.argv = {
            "weightserver": [*PPOMQ, "weightserver", *common, "--bind", weights,
                             "--poll-interval-s", "0.2", *server],
            "learner": [*PPOMQ, "learner", *common, *ROLLOUT, *LEARNER_SMALL,
                        "--run-dir", str(root / "run"), "--rollout-bind", self.rollout,
                        "--total-steps", "0", "--actors", "2", "--target-return", "100000",
                        "--max-staleness", str(STALENESS), "--keep-versions",
                        str(STALENESS + 2), "--max-message-bytes", str(MAX_MESSAGE), *server],
        }  # fmt: skip
        for i in range(2):
            flags: list[str] = []
            if keys is not None:
                flags = ["--curve-actor-cert", str(keys / "actors" / f"actor-{i}.key_secret"),
                         "--curve-server-public-cert", str(keys / "server.key")]  # fmt: skip
            self.argv[f"actor-{i}"] = [
                *PPOMQ, "actor", "--run-id", RUN_ID, *ROLLOUT, "--actor-index", str(i),
                "--learner-addr", self.rollout, "--weightserver-addr", weights, *flags,
            ]  # fmt: skip
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.r = redis.Redis.from_url(redis_url, socket_timeout=5)
        self.run_keys = RunKeys(RUN_ID)

    def __enter__(self) -> System:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
        for name, argv in self.argv.items():
            log = open(self.root / f"{name}.log", "ab")
            self.procs[name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            log.close()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs.values()):
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.r.close()

    def stats(self) -> dict[str, Any]:
        raw = self.r.get(self.run_keys.stats)
        return json.loads(raw) if raw else {}

    def version(self) -> int:
        raw = self.r.get(self.run_keys.latest)
        return int(raw) if raw else 0

    def snapshot(self) -> tuple[float, dict[str, dict[str, Any]]]:
        """When the learner last wrote its status, and each actor's ledger row as of then:
        one status write puts both, in one transaction, so they agree."""
        pipe = self.r.pipeline(transaction=True)
        pipe.get(self.run_keys.stats)
        pipe.hgetall(self.run_keys.actors)
        stats, actors = pipe.execute()
        at = float(json.loads(stats)["counts_at"]) if stats else 0.0
        rows = {k.decode(): json.loads(v).get("ledger") or {} for k, v in actors.items()}
        return at, rows

    def wait(self, cond: Any, what: str, timeout_s: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = cond()
            if got:
                return got
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited: {(self.root / f'{name}.log').read_text()}")
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}")


def window(system: System, mode: str, window_s: float, victim: str) -> dict[str, Any]:
    """One measured window; the helper prepares before it starts."""
    rejects0 = Counter(system.stats().get("rejects", {}))
    out: dict[str, Any] = {"mode": mode, "load1_before": harness.load1()}
    proc = None
    if mode != "unharmed":
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        keys = str(system.keys) if system.keys else None
        proc = ctx.Process(
            target=helper, args=(child, mode, system.rollout, victim, keys, system.redis_url)
        )
        proc.start()
        assert parent.poll(60) and parent.recv() == "ready"
        parent.send(window_s)
    at0, rows0 = system.snapshot()  # once the helper runs
    v0, t0 = system.version(), time.monotonic()
    time.sleep(window_s)
    v1, t1 = system.version(), time.monotonic()
    at1, rows1 = system.snapshot()
    out["updates_per_s"] = (v1 - v0) / (t1 - t0)
    out["versions"] = v1 - v0
    honest = sorted(k for k in rows1 if not k.startswith(FLOODER))
    out["honest_accepted"] = sum(_delta(rows0, rows1, k, "accepted") for k in honest)
    out["honest_batches_per_s"] = out["honest_accepted"] / (at1 - at0)
    if proc is not None:
        assert parent.poll(60)
        out.update(parent.recv())
        proc.join(30)
        out["msgs_per_s"] = out["sent"] / out["wall_s"]
        out["helper_cores"] = out["cpu_s"] / out["wall_s"]
    # Let the learner drain what it queued, then see what it counted.
    time.sleep(1.5)
    out["learner_counted"] = (Counter(system.stats().get("rejects", {})) - rejects0).total()
    if mode == "valid-flood":
        _, rows2 = system.snapshot()
        flooders = [k for k in rows2 if k.startswith(FLOODER)]
        for what in ("accepted", "surplus"):
            out[f"flooder_{what}"] = sum(_delta(rows0, rows2, k, what) for k in flooders)
    out["load1_after"] = harness.load1()
    return out


def _delta(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], actor: str, what: str
) -> int:
    return int(after.get(actor, {}).get(what, 0)) - int(before.get(actor, {}).get(what, 0))


def run_round(root: Path, curve: bool, order: list[str], window_s: float) -> list[dict[str, Any]]:
    keys = None
    if curve:
        keys = root / "keys"
        subprocess.run([*PPOMQ, "keys", "generate", "--out", str(keys), "--actors", "3"],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
    server = EmbeddedRedis()
    try:
        with System(root, server.url, keys) as system:
            system.wait(lambda: system.version() >= WARM_VERSION, f"version {WARM_VERSION}")
            actors = system.wait(
                lambda: sorted(k.decode() for k in system.r.hkeys(system.run_keys.actors)),
                "the actors hash",
            )
            return [window(system, mode, window_s, actors[0]) for mode in order]
    finally:
        server.close()


def summarise(windows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for curve in ("off", "on"):
        ws = [w for w in windows if w["curve"] == curve]
        if not ws:
            continue
        med = {m: statistics.median(w["updates_per_s"] for w in ws if w["mode"] == m)
               for m in MODES}  # fmt: skip
        honest = {m: statistics.median(w["honest_batches_per_s"] for w in ws if w["mode"] == m)
                  for m in MODES}  # fmt: skip
        floods = [w for w in ws if w["mode"] == "flood"]
        valid = [w for w in ws if w["mode"] == "valid-flood"]
        out[curve] = {
            "honest_batches_per_s_median": honest,
            "valid_flood_over_unharmed": med["valid-flood"] / med["unharmed"],
            "honest_valid_flood_over_unharmed": honest["valid-flood"] / honest["unharmed"],
            "honest_control_over_unharmed": honest["control"] / honest["unharmed"],
            "valid_flood_msgs_per_s_median": statistics.median(w["msgs_per_s"] for w in valid),
            "valid_flood_helper_cores_median": statistics.median(w["helper_cores"] for w in valid),
            "valid_flood_sent_total": sum(w["sent"] for w in valid),
            "valid_flood_versions_total": sum(w["versions"] for w in valid),
            "flooder_accepted_total": sum(w["flooder_accepted"] for w in valid),
            "flooder_surplus_total": sum(w["flooder_surplus"] for w in valid),
            "updates_per_s_median": med,
            "flood_over_unharmed": med["flood"] / med["unharmed"],
            "flood_over_control": med["flood"] / med["control"],
            "control_over_unharmed": med["control"] / med["unharmed"],
            "flood_msgs_per_s_median": statistics.median(w["msgs_per_s"] for w in floods),
            "flood_helper_cores_median": statistics.median(w["helper_cores"] for w in floods),
            "control_helper_cores_median": statistics.median(
                w["helper_cores"] for w in ws if w["mode"] == "control"
            ),
            "flood_sent_total": sum(w["sent"] for w in floods),
            "flood_counted_total": sum(w["learner_counted"] for w in floods),
        }
    return out


def markdown(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    lines = [
        "# Learner updates per second under a flood of junk or of valid batches",
        "",
        f"`{doc['command']}` on {harness.machine_line(doc['machine'])}, {doc['date_utc']}. "
        f"{doc['rounds']} rounds, "
        f"each a fresh weightserver + learner + 2 CartPole actors (T={T}, N={N}, 4 epochs, "
        f"minibatch 128) on loopback, {doc['window_s']:g} s windows in rotating order "
        "(unharmed, control, flood, valid-flood); medians over the rounds. Control: the "
        "helper process busy-loops on one core and sends nothing. Flood: the same helper "
        "sends hostile messages as fast as it can (malformed, stale, spoofed; under CURVE "
        "from a valid, allowed key). 1-min load average before the first and after the last "
        f"window: {doc['load1_first']} / {doc['load1_last']}.",
        "",
        "| CURVE | unharmed upd/s | control upd/s | flood upd/s | flood/unharmed "
        "| flood/control | control/unharmed | flood msgs/s | flooder cores | "
        "sent / counted by learner |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for curve, x in s.items():
        m = x["updates_per_s_median"]
        lines.append(
            f"| {curve} | {m['unharmed']:.1f} | {m['control']:.1f} | {m['flood']:.1f} | "
            f"{x['flood_over_unharmed']:.2f} | {x['flood_over_control']:.2f} | "
            f"{x['control_over_unharmed']:.2f} | {x['flood_msgs_per_s_median']:,.0f} | "
            f"{x['flood_helper_cores_median']:.2f} | "
            f"{x['flood_sent_total']:,} / {x['flood_counted_total']:,} |"
        )
    lines += [
        "",
        "Valid flood: the helper sends well-formed batches at the learner's current version "
        "under one id of its own, as fast as it can. Honest batches/s: the two actors' "
        "batches trained on per second of the window.",
        "",
        "| CURVE | unharmed upd/s | control upd/s | valid-flood upd/s | valid-flood/unharmed "
        "| honest batches/s unharmed | control | valid-flood | honest control/unharmed "
        "| honest valid-flood/unharmed | flood msgs/s | flooder cores "
        "| sent / trained / surplus (versions) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for curve, x in s.items():
        m, h = x["updates_per_s_median"], x["honest_batches_per_s_median"]
        lines.append(
            f"| {curve} | {m['unharmed']:.1f} | {m['control']:.1f} | {m['valid-flood']:.1f} | "
            f"{x['valid_flood_over_unharmed']:.2f} | {h['unharmed']:.1f} | {h['control']:.1f} | "
            f"{h['valid-flood']:.1f} | {x['honest_control_over_unharmed']:.2f} | "
            f"{x['honest_valid_flood_over_unharmed']:.2f} | "
            f"{x['valid_flood_msgs_per_s_median']:,.0f} | "
            f"{x['valid_flood_helper_cores_median']:.2f} | "
            f"{x['valid_flood_sent_total']:,} / {x['flooder_accepted_total']:,} / "
            f"{x['flooder_surplus_total']:,} ({x['valid_flood_versions_total']:,}) |"
        )
    lines += ["", "Every window:", "",
              "| CURVE | round | mode | upd/s | honest batches/s | msgs/s | helper cores "
              "| load before |",
              "|---|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for w in doc["windows"]:
        lines.append(
            f"| {w['curve']} | {w['round']} | {w['mode']} | {w['updates_per_s']:.1f} | "
            f"{w['honest_batches_per_s']:.1f} | {w.get('msgs_per_s', 0):,.0f} | "
            f"{w.get('helper_cores', 0):.2f} | {w['load1_before']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--window-s", type=float, default=8.0)
    p.add_argument("--curve", choices=["off", "on", "both"], default="both")
    p.add_argument("--quick", action="store_true", help="1 round, 2 s windows (smoke test)")
    p.add_argument("--out", default=str(harness.RESULTS))
    harness.add_lock_option(p)
    args = p.parse_args(argv)
    bench_run = harness.Run("flood", argv)
    if args.quick:
        args.rounds, args.window_s = 1, 2.0
    curves = {"off": [False], "on": [True], "both": [False, True]}[args.curve]
    windows: list[dict[str, Any]] = []
    load_first = harness.load1()
    with tempfile.TemporaryDirectory(prefix="ppomq-flood-") as tmp:
        for r in range(args.rounds):
            for curve in curves:
                root = Path(tmp) / f"r{r}-{'on' if curve else 'off'}"
                root.mkdir()
                with harness.BenchLock(args.lock):
                    got = run_round(root, curve, harness.round_order(MODES, r), args.window_s)
                for w in got:
                    w.update(curve="on" if curve else "off", round=r)
                    windows.append(w)
                    print(json.dumps(w), flush=True)
    doc = {
        "command": harness.command_line("flood", argv),
        "date_utc": harness.utc_now(),
        "machine": harness.machine(),
        "rounds": args.rounds,
        "window_s": args.window_s,
        "load1_first": load_first,
        "load1_last": harness.load1(),
        "windows": windows,
        "summary": summarise(windows),
    }
    print(harness.write_results(Path(args.out), "flood", doc, markdown(doc), bench_run))
    return doc


if __name__ == "__main__":
    main()
