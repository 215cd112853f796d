"""Weights distribution benchmark: publish time, and publish -> every actor holds it.

    .venv/bin/python -m benchmarks.weights_fanout [--quick]

Everything real, on loopback: a redis-server started here, `ppomq weightserver` as a
subprocess, and 16 actor clients as separate processes, each looping on
`WeightsClient.get_newer(have, wait_ms=...)` (long poll). The CNN runs twice: with the
client's default (no sha256 on the actor: the weightserver verified it) and with
`verify=True` on every client, to show what that check costs.

For each publish we time `WeightStore.publish` (MULTI/EXEC + PUBLISH + retention) and,
per client, the time from the start of the publish until that client holds the new
version (clients report their CLOCK_MONOTONIC receive time, system-wide on Linux).
p50/p99 are over all (publish, client) pairs of one run; the reported figure is the
median over runs. Results go to benchmarks/results/weights.{json,md}.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks import harness
from ppomq.core.store.embedded import free_port

NUM_CLIENTS = 16
TARGET_P99_MS = {"mlp_64_64": 50.0, "nature_cnn": 250.0}


def mlp_params() -> dict[str, tuple[int, ...]]:
    """CartPole-size actor-critic MLP: 4 -> 64 -> 64 -> (2 logits, 1 value)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for head, out in (("pi", 2), ("vf", 1)):
        shapes |= {
            f"{head}.0.weight": (64, 4), f"{head}.0.bias": (64,),
            f"{head}.2.weight": (64, 64), f"{head}.2.bias": (64,),
            f"{head}.4.weight": (out, 64), f"{head}.4.bias": (out,),
        }  # fmt: skip
    return shapes


def nature_cnn_params() -> dict[str, tuple[int, ...]]:
    """Mnih et al. 2015 ("Nature DQN") torso on 4x84x84, 512 hidden, 6 actions + value."""
    return {
        "conv1.weight": (32, 4, 8, 8), "conv1.bias": (32,),
        "conv2.weight": (64, 32, 4, 4), "conv2.bias": (64,),
        "conv3.weight": (64, 64, 3, 3), "conv3.bias": (64,),
        "fc.weight": (512, 3136), "fc.bias": (512,),
        "pi.weight": (6, 512), "pi.bias": (6,),
        "vf.weight": (1, 512), "vf.bias": (1,),
    }  # fmt: skip


def _client_main(idx: int, endpoint: str, report: str, stop_version: int, verify: bool) -> None:
    """One actor: long-poll for newer weights, report (idx, version, receive time)."""
    import zmq

    from ppomq.core.transport.weights_client import WeightsClient, WeightsTimeoutError

    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(report)
    have = -1
    with WeightsClient(endpoint, timeout_ms=10_000, context=ctx, verify=verify) as client:
        while have < stop_version:
            try:
                got = client.get_newer(have, wait_ms=2_000)
            except WeightsTimeoutError:
                continue
            if got is None:
                continue
            now = time.monotonic_ns()
            have = got[0].version
            push.send_json([idx, have, now])
    push.close(linger=5000)
    ctx.term()


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def bench_model(
    name: str,
    target: str,
    shapes: dict[str, tuple[int, ...]],
    *,
    redis_url: str,
    publishes: int,
    runs: int,
    warmup: int,
    verify: bool = False,
) -> dict[str, Any]:
    import redis
    import zmq

    from ppomq.core.store.weight_store import WeightStore
    from ppomq.proto.weights_blob import pack_weights

    run_id = "bench-" + "".join(c if c.isalnum() else "-" for c in name)
    rng = np.random.default_rng(0)
    tensors = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    num_params = sum(int(np.prod(s)) for s in shapes.values())
    total = warmup + runs * publishes
    store = WeightStore(redis.Redis.from_url(redis_url), run_id, keep_versions=5)

    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    ws_port = free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "ppomq.cli", "weightserver",
            "--bind", f"tcp://127.0.0.1:{ws_port}",
            "--redis-url", redis_url, "--run-id", run_id, "--log-level", "WARNING",
        ],
        env=env,
    )  # fmt: skip
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    report_port = pull.bind_to_random_port("tcp://127.0.0.1")
    spawn = mp.get_context("spawn")
    clients = [
        spawn.Process(
            target=_client_main,
            args=(i, f"tcp://127.0.0.1:{ws_port}", f"tcp://127.0.0.1:{report_port}", total, verify),
        )
        for i in range(NUM_CLIENTS)
    ]
    for p in clients:
        p.start()

    def wait_all(version: int) -> list[int]:
        """Receive times of `version` from every client."""
        times: dict[int, int] = {}
        while len(times) < NUM_CLIENTS:
            if not pull.poll(60_000):
                raise RuntimeError(f"clients stalled at version {version}: {sorted(times)}")
            idx, v, t = pull.recv_json()
            if v == version:
                times[idx] = t
        return list(times.values())

    publish_ms: list[list[float]] = []
    latency_ms: list[list[float]] = []
    try:
        version = 0
        for i in range(total):
            version += 1
            header, blob = pack_weights(version, tensors, model={"bench": name})
            t0 = time.monotonic_ns()
            store.publish(header, blob)
            t1 = time.monotonic_ns()
            received = wait_all(version)
            if i < warmup:  # the first ones also wait for 16 processes to start up
                continue
            run = (i - warmup) // publishes
            if run == len(publish_ms):
                publish_ms.append([])
                latency_ms.append([])
            publish_ms[run].append((t1 - t0) / 1e6)
            latency_ms[run].extend((t - t0) / 1e6 for t in received)
    finally:
        for p in clients:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
        server.terminate()
        server.wait(timeout=20)
        pull.close(linger=0)
        ctx.term()

    def summary(per_run: list[list[float]]) -> dict[str, float]:
        return {
            "p50_ms": round(statistics.median(_percentile(r, 50) for r in per_run), 3),
            "p99_ms": round(statistics.median(_percentile(r, 99) for r in per_run), 3),
            "max_ms": round(max(max(r) for r in per_run), 3),
        }

    result = {
        "model": name,
        "num_params": num_params,
        "blob_bytes": len(blob),
        "clients": NUM_CLIENTS,
        "runs": runs,
        "publishes_per_run": publishes,
        "publish": summary(publish_ms),
        "publish_to_all_clients": summary(latency_ms),
        "client_sha256": verify,
        "target_p99_ms": TARGET_P99_MS[target],
    }
    result["meets_target"] = result["publish_to_all_clients"]["p99_ms"] < TARGET_P99_MS[target]
    return result


def _start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    import redis

    from ppomq.core.store.connect import redis_server_binary

    port = free_port()
    proc = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(200):
        try:
            redis.Redis.from_url(url).ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.025)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def _markdown(doc: dict[str, Any]) -> str:
    lines = [
        "# Weights distribution benchmark",
        "",
        f"`{doc['command']}` on {harness.machine_line(doc['machine'])}, {doc['date']}; 1-minute "
        "load average "
        f"{doc['machine']['loadavg_1m_before']} before, {doc['machine']['loadavg_1m_after']} "
        "after (everything, Redis and the 16 clients included, shares these CPUs).",
        "",
        f"Publish = `WeightStore.publish` (MULTI/EXEC, PUBLISH, retention). Publish→all = from "
        f"the start of a publish until each of {NUM_CLIENTS} client processes holds the new "
        "version through one weightserver (long poll; the weightserver verifies each "
        "version's sha256 once; 'client sha256' rows verify again on every client). "
        "Median over runs of each run's percentile.",
        "",
        "| parameter set | params | blob | publish p50 | publish p99 | publish→all p50 "
        "| publish→all p99 | target p99 | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc["results"]:
        lines.append(
            f"| {r['model']} | {r['num_params']:,} | {r['blob_bytes'] / 2**20:.2f} MiB "
            f"| {r['publish']['p50_ms']:.2f} ms | {r['publish']['p99_ms']:.2f} ms "
            f"| {r['publish_to_all_clients']['p50_ms']:.2f} ms "
            f"| {r['publish_to_all_clients']['p99_ms']:.2f} ms "
            f"| < {r['target_p99_ms']:.0f} ms | {'yes' if r['meets_target'] else 'NO'} |"
        )
    lines += [
        "",
        f"{doc['results'][0]['runs']} runs; publishes per run: "
        + "; ".join(f"{r['model']} {r['publishes_per_run']}" for r in doc["results"])
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mlp-publishes", type=int, default=200)
    parser.add_argument("--cnn-publishes", type=int, default=40)
    parser.add_argument("--only", choices=["mlp_64_64", "nature_cnn"], default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run; results not saved")
    harness.add_lock_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.mlp_publishes, args.cnn_publishes = 1, 10, 5
    load_before = harness.load1()
    with harness.BenchLock(args.lock), tempfile.TemporaryDirectory(prefix="ppomq-bench-") as tmp:
        run = harness.Run("weights_fanout", argv)
        redis_proc, url = _start_redis(tmp)
        try:
            cases = [  # (label, target key, shapes, publishes per run, client sha256)
                ("mlp_64_64", "mlp_64_64", mlp_params(), args.mlp_publishes, False),
                ("nature_cnn", "nature_cnn", nature_cnn_params(), args.cnn_publishes, False),
                (
                    "nature_cnn, client sha256",
                    "nature_cnn",
                    nature_cnn_params(),
                    args.cnn_publishes,
                    True,
                ),
            ]
            results = [
                bench_model(label, target, shapes, redis_url=url, publishes=n, runs=args.runs,
                            warmup=3, verify=verify)
                for label, target, shapes, n, verify in cases
                if args.only in (None, target)
            ]  # fmt: skip
        finally:
            redis_proc.kill()
            redis_proc.wait()
    doc = {
        "benchmark": "weights",
        "command": harness.command_line("weights_fanout", argv),
        "date": harness.utc_now(),
        # Other work on the machine skews the tails; the 1-minute load says how much.
        "machine": harness.machine(loadavg_1m_before=load_before, loadavg_1m_after=harness.load1()),
        "results": results,
    }
    print(_markdown(doc))
    if not args.quick:
        harness.write_results(harness.RESULTS, "weights", doc, _markdown(doc), run)
    # The targets apply to the default configuration; the client-sha256 row is diagnostic.
    return 0 if all(r["meets_target"] for r in results if not r["client_sha256"]) else 1


if __name__ == "__main__":
    sys.exit(main())
