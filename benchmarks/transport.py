"""Rollout transport benchmark: ppomq (encode, send, receive, decode + validate) against raw
ZeroMQ multipart sends of the same bytes, over tcp loopback and ipc, in one run.

    .venv/bin/python -m benchmarks.transport [--runs 5] [--quick]
    .venv/bin/python -m benchmarks.transport --curve [--runs 7]   # CURVE on vs off, tcp

The sender is a separate process; the receiver (this process) times from the first to the
last message of each run. Modes alternate run by run so that both see the same machine
load; each figure is the median over the runs. Both modes use the same high-water mark, so
the ratio isolates what ppomq adds. Writes benchmarks/results/transport.{json,md}.

`--curve` compares ppomq with CURVE on (authentication + encryption, ppomq.core.transport.curvezmq;
the
learner's key check included) against ppomq with it off, over tcp loopback, interleaved the
same way; writes benchmarks/results/transport_curve.{json,md}.

    .venv/bin/python -m benchmarks.transport --frames [--runs 7]  # Atari stacks: obs vs frames

`--frames` sends Atari-shaped stacks as a FrameStackObservation makes them (one new 84x84
frame a step, 2% resets) in ROLLOUT 1.1's `obs` layout and in 1.2's frames layout (each frame
once; ppomq's default for uint8 stacks), ppomq and raw ZeroMQ of the same bytes, the four
interleaved; writes benchmarks/results/transport_frames.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from benchmarks import harness
from ppomq.core.transport.curvezmq import CurveClient, CurveServer, actor_id_matches_key, sender_key
from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender
from ppomq.proto import (
    ActionSpace,
    EpisodeStats,
    RolloutBatch,
    RolloutSpec,
    SeqTracker,
    decode,
    encode,
)

HWM = 4  # TransportSettings.rollout_hwm's default, used by both modes
WARMUP = 3


@dataclass(frozen=True)
class Size:
    name: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    messages: int  # per timed run


SIZES = {
    "cartpole": Size("CartPole (T=128, N=8, obs f32[4])", (4,), "float32", 3000),
    "atari": Size("Atari (T=128, N=8, obs u8[4,84,84])", (4, 84, 84), "uint8", 60),
    # --frames only: stacks that share frames, as an Atari env's do
    "atari_stacked": Size("Atari stacks (T=128, N=8, u8[4,84,84])", (4, 84, 84), "uint8", 60),
}
MAIN_SIZES = ("cartpole", "atari")
T, N = 128, 8


def latency_messages(size: Size) -> int:
    """Batches in a latency run (one in flight): a tenth of a throughput run's, >= 20."""
    return max(20, size.messages // 10)


def make_spec(size: Size) -> RolloutSpec:
    return RolloutSpec(
        run_id="bench",
        obs_shape=size.obs_shape,
        obs_dtype=size.obs_dtype,
        action=ActionSpace("discrete", n=4),
        num_steps=T,
        num_envs=N,
        env_id="Bench-v0",
    )


def stacked_obs(rng: np.random.Generator, s: int = 4, reset_p: float = 0.02) -> np.ndarray:
    """[T, N, s, 84, 84] uint8 as FrameStackObservation builds them: each step drops the
    oldest frame and appends a new one; a reset fills the stack with its one frame."""
    obs = np.empty((T, N, s, 84, 84), np.uint8)
    for i in range(N):
        stack = list(rng.integers(0, 256, (s, 84, 84), dtype=np.uint8))
        for t in range(T):
            if t and rng.random() < reset_p:
                stack = [rng.integers(0, 256, (84, 84), dtype=np.uint8)] * s
            elif t:
                stack = [*stack[1:], rng.integers(0, 256, (84, 84), dtype=np.uint8)]
            obs[t, i] = np.stack(stack)
    return obs


def _layout(mode: str) -> bool | None:
    """encode's `frames` argument for a mode: *_obs modes send ROLLOUT 1.1's `obs` layout."""
    return False if mode.endswith("_obs") else None


def make_batch(size: Size, seq: int = 0) -> RolloutBatch:
    rng = np.random.default_rng(0)
    shape = (T, N, *size.obs_shape)
    if size.name.startswith("Atari stacks"):
        obs = stacked_obs(rng)
    elif size.obs_dtype == "uint8":
        obs = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        obs = rng.standard_normal(shape).astype(np.float32)
    f32 = np.float32
    arrays = {
        "obs": obs,
        "actions": rng.integers(0, 4, (T, N), dtype=np.int64),
        "logp": rng.standard_normal((T, N)).astype(f32),
        "values": rng.standard_normal((T, N)).astype(f32),
        "rewards": np.ones((T, N), f32),
        "terminated": rng.random((T, N)) < 0.02,
        "truncated": np.zeros((T, N), bool),
        "final_values": np.zeros((T, N), f32),
        "bootstrap_value": rng.standard_normal(N).astype(f32),
    }
    return RolloutBatch(
        run_id="bench",
        actor_id="actor-0",
        seq=seq,
        policy_version=1,
        env_id="Bench-v0",
        num_envs=N,
        num_steps=T,
        arrays=arrays,
        episodes=EpisodeStats([21.0, 35.0], [21, 35]),
        created_ns=time.time_ns(),
    )


def sender_main(conn: Connection) -> None:
    """Serve send jobs: (endpoint, mode, size key, count) -> sends them, answers 'sent'."""
    batches = {key: make_batch(size) for key, size in SIZES.items()}
    while True:
        job = conn.recv()
        if job is None:
            return
        endpoint, mode, key, count, curve, lockstep = job
        batch = batches[key]
        # Each socket stays open until the receiver has everything: libzmq may drop the
        # last messages of a PUSH socket closed while the peer's queue is full, linger or
        # not (libzmq#3774, #1922).
        if mode in ("ppomq", "ppomq_obs", "curve"):
            with RolloutSender(endpoint, hwm=HWM, curve=curve) as tx:
                for seq in range(count):
                    if lockstep:  # latency: one batch in flight, sent when the receiver asks
                        conn.recv()
                    batch.seq = seq
                    batch.created_ns = time.time_ns()
                    if not tx.send(encode(batch, frames=_layout(mode)), timeout_ms=60_000):
                        raise RuntimeError("ppomq send timed out")
                conn.send("sent")
                conn.recv()
        else:
            frames = encode(batch, frames=_layout(mode))  # the same bytes, encoded once
            sock = zmq.Context.instance().socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, HWM)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.connect(endpoint)
            for _ in range(count):
                sock.send_multipart(frames, copy=False)
            conn.send("sent")
            conn.recv()
            sock.close()


def receive_run(
    conn: Connection,
    endpoint: str,
    mode: str,
    key: str,
    curve: tuple[CurveServer, CurveClient] | None = None,
    latencies: list[float] | None = None,
) -> tuple[float, int]:
    """One timed run: (seconds for `messages` batches after warm-up, bytes per batch).
    Modes: ppomq, raw, curve (ppomq with CURVE, `curve`: the server's and client's keys).

    With `latencies` (ppomq modes only) the run is a latency run instead: one batch in
    flight at a time, LATENCY_MESSAGES of them, each one's time from just before its
    encode to the end of its decode (ms, the machine's one clock) appended to it."""
    size = SIZES[key]
    lockstep = latencies is not None
    count = WARMUP + (latency_messages(size) if lockstep else size.messages)
    spec = make_spec(size)
    client = None
    if mode in ("ppomq", "ppomq_obs", "curve"):
        server = None
        if mode == "curve":
            assert curve is not None
            server, client = curve
        rx: Any = RolloutReceiver(endpoint, hwm=HWM, curve=server)
        bound = rx.endpoint
    else:
        rx = zmq.Context.instance().socket(zmq.PULL)
        rx.setsockopt(zmq.RCVHWM, HWM)
        rx.setsockopt(zmq.LINGER, 0)
        if endpoint.endswith(":0"):
            endpoint = endpoint[:-2] + ":*"
        rx.bind(endpoint)
        bound = rx.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        conn.send((bound, mode, key, count, client, lockstep))
        seqs = SeqTracker()
        nbytes = 0
        start = 0.0
        for i in range(count):
            if i == WARMUP:
                start = time.perf_counter()
            if lockstep:
                conn.send("next")
            if mode in ("ppomq", "ppomq_obs", "curve"):
                deadline = time.monotonic() + 60
                frames = rx.recv(timeout_ms=60_000)
                while frames is None and time.monotonic() < deadline:
                    frames = rx.recv(timeout_ms=1000)  # a spurious wake (recv's contract)
                if frames is None:
                    raise RuntimeError(f"ppomq receive timed out after {i} of {count}")
                batch = decode(frames, spec, seqs)
                if mode == "curve":  # the learner's identity check (services/learner)
                    actor_id_matches_key(batch.actor_id, sender_key(frames[0]) or "")
                seqs.record(batch.actor_id, batch.seq)  # as the learner does on acceptance
                nbytes = batch.nbytes
                if latencies is not None and i >= WARMUP:
                    latencies.append((time.time_ns() - batch.created_ns) / 1e6)
            else:
                frames = rx.recv_multipart(copy=False)
                nbytes = sum(len(f) for f in frames)
        elapsed = time.perf_counter() - start
        if conn.recv() != "sent":
            raise RuntimeError("sender failed")
        conn.send("close")
        return elapsed, nbytes
    finally:
        rx.close()


def codec_overhead_us(repeats: int = 7, loops: int = 3000) -> dict[str, float]:
    """encode + decode (with validation) of one CartPole-size batch, in microseconds."""
    size = SIZES["cartpole"]
    spec = make_spec(size)
    batch = make_batch(size)
    wire = [f.tobytes() if isinstance(f, np.ndarray) else bytes(f) for f in encode(batch)]

    def timed(fn) -> tuple[float, float]:
        for _ in range(300):
            fn()
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(loops):
                fn()
            runs.append((time.perf_counter() - t0) / loops * 1e6)
        return statistics.median(runs), min(runs)

    enc, enc_best = timed(lambda: encode(batch))
    dec, dec_best = timed(lambda: decode(wire, spec))
    return {
        "encode_us": enc,
        "decode_validate_us": dec,
        "total_us": enc + dec,
        "best_run_total_us": enc_best + dec_best,  # least disturbed by other load
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per mode (median)")
    parser.add_argument("--quick", action="store_true", help="fewer messages (smoke test)")
    parser.add_argument(
        "--curve", action="store_true", help="compare CURVE on/off instead (tcp only)"
    )
    parser.add_argument(
        "--frames", action="store_true", help="Atari stacks: obs layout vs frames layout"
    )
    harness.add_lock_option(parser)
    args = parser.parse_args(argv)
    with harness.BenchLock(args.lock):
        measure(args, argv)


def measure(args: argparse.Namespace, argv: list[str] | None) -> None:
    """The comparison `args` asks for, written to benchmarks/results/transport*.{json,md}."""
    bench_run = harness.Run("transport", argv)
    if args.quick:
        for key, size in SIZES.items():
            SIZES[key] = Size(size.name, size.obs_shape, size.obs_dtype, size.messages // 10)

    if args.curve:
        curve_main(args.runs, bench_run)
        return
    if args.frames:
        frames_main(args.runs, bench_run)
        return
    codec = codec_overhead_us()  # first, before the transport runs heat the machine
    print(f"codec: {codec}", flush=True)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=sender_main, args=(child,), daemon=True)
    proc.start()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ppomq-bench-", dir="/tmp") as tmp:
        for key in MAIN_SIZES:
            for transport in ("tcp", "ipc"):
                endpoint = "tcp://127.0.0.1:0" if transport == "tcp" else f"ipc://{tmp}/b"
                row = measure_pair(parent, endpoint, ("ppomq", "raw"), key, args.runs)
                row["transport"] = transport
                row["ratio"] = row["ppomq_batches_per_s"] / row["raw_batches_per_s"]
                rows.append(row)
                print(
                    f"{key:9s} {transport}: ppomq {row['ppomq_batches_per_s']:9.1f}/s "
                    f"raw {row['raw_batches_per_s']:9.1f}/s ratio {row['ratio']:.3f}",
                    flush=True,
                )
    parent.send(None)
    proc.join(10)
    result = {
        "command": harness.command_line("transport", argv),
        "date": harness.utc_now(),
        "machine": harness.machine(),
        "zmq": zmq.zmq_version(),
        "pyzmq": zmq.__version__,
        "runs": args.runs,
        "hwm": HWM,
        "rows": rows,
        "codec_cartpole": codec,
    }
    print(harness.write_results(harness.RESULTS, "transport", result, markdown(result), bench_run))


def measure_pair(
    conn: Connection,
    endpoint: str,
    modes: tuple[str, str],
    key: str,
    runs: int,
    keys: tuple[CurveServer, CurveClient] | None = None,
) -> dict[str, Any]:
    """Two modes at one size, interleaved run by run (the order alternates), medians."""
    got = harness.interleave(
        modes, runs, lambda mode, _r: receive_run(conn, endpoint, mode, key, keys), order="reverse"
    )
    times = {m: [elapsed for elapsed, _ in got[m]] for m in modes}
    nbytes = got[modes[0]][-1][1]
    n = SIZES[key].messages
    row: dict[str, Any] = {"size": key, "label": SIZES[key].name, "batch_bytes": nbytes}
    for mode in modes:
        sec = statistics.median(times[mode])
        row[f"{mode}_batches_per_s"] = n / sec
        row[f"{mode}_MB_per_s"] = n * nbytes / sec / 1e6
        row[f"{mode}_ms_per_batch"] = sec / n * 1e3
        row[f"{mode}_runs_s"] = times[mode]
    return row


def measure_latency(
    conn: Connection,
    endpoint: str,
    modes: tuple[str, str],
    key: str,
    runs: int,
    keys: tuple[CurveServer, CurveClient] | None = None,
) -> dict[str, Any]:
    """Per-batch latency, one batch in flight: `runs` latency runs per mode, interleaved
    (order alternating); per mode the median over runs of each run's median (and p90)."""

    def one_run(mode: str, _run: int) -> tuple[float, float]:
        got: list[float] = []
        receive_run(conn, endpoint, mode, key, keys, latencies=got)
        return statistics.median(got), statistics.quantiles(got, n=10)[-1]

    per_mode = harness.interleave(modes, runs, one_run, order="reverse")
    medians = {m: [med for med, _ in per_mode[m]] for m in modes}
    p90s = {m: [p90 for _, p90 in per_mode[m]] for m in modes}
    row: dict[str, Any] = {"latency_batches_per_run": latency_messages(SIZES[key])}
    for mode in modes:
        row[f"{mode}_latency_ms"] = statistics.median(medians[mode])
        row[f"{mode}_latency_p90_ms"] = statistics.median(p90s[mode])
        row[f"{mode}_latency_runs_ms"] = medians[mode]
    return row


def frames_main(runs: int, bench_run: harness.Run) -> None:
    """Atari stacks, ROLLOUT 1.1's obs layout against 1.2's frames layout, ppomq and raw."""
    from ppomq.proto.rollout_frames import to_frames

    key = "atari_stacked"
    obs = make_batch(SIZES[key]).arrays["obs"]
    frames, idx = to_frames(obs)
    steps = T * N
    sizes = {
        "obs_bytes_per_env_step": obs.nbytes / steps,
        "frames_bytes_per_env_step": (frames.nbytes + idx.nbytes) / steps,
        "frames_K": len(frames),
    }
    sizes["ratio"] = sizes["obs_bytes_per_env_step"] / sizes["frames_bytes_per_env_step"]
    print(f"sizes: {sizes}", flush=True)
    timings = {}
    for name, fn in (("to_frames_ms", lambda: to_frames(obs)),):
        runs_ms = []
        for _ in range(7):
            t0 = time.perf_counter()
            fn()
            runs_ms.append((time.perf_counter() - t0) * 1e3)
        timings[name] = statistics.median(runs_ms)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=sender_main, args=(child,), daemon=True)
    proc.start()
    rows = []
    modes = ("ppomq_obs", "ppomq", "raw_obs", "raw")
    with tempfile.TemporaryDirectory(prefix="ppomq-bench-", dir="/tmp") as tmp:
        for transport in ("tcp", "ipc"):
            endpoint = "tcp://127.0.0.1:0" if transport == "tcp" else f"ipc://{tmp}/b"
            row = measure_frames(parent, endpoint, modes, key, runs)
            row["transport"] = transport
            rows.append(row)
            print(json.dumps(row), flush=True)
    parent.send(None)
    proc.join(10)
    result = {
        "command": bench_run.command,
        "date": harness.utc_now(),
        "machine": harness.machine(),
        "zmq": zmq.zmq_version(),
        "pyzmq": zmq.__version__,
        "runs": runs,
        "hwm": HWM,
        "messages_per_run": SIZES[key].messages,
        "sizes": sizes,
        "timings": timings,
        "rows": rows,
    }
    print(
        harness.write_results(
            harness.RESULTS, "transport_frames", result, frames_markdown(result), bench_run
        )
    )


def measure_frames(
    conn: Connection, endpoint: str, modes: tuple[str, ...], key: str, runs: int
) -> dict[str, Any]:
    """Modes interleaved run by run (order alternating), medians; bytes per batch per mode."""
    got = harness.interleave(
        modes, runs, lambda mode, _r: receive_run(conn, endpoint, mode, key), order="reverse"
    )
    times = {m: [elapsed for elapsed, _ in got[m]] for m in modes}
    nbytes = {m: got[m][-1][1] for m in modes}
    n = SIZES[key].messages
    row: dict[str, Any] = {"size": key, "label": SIZES[key].name}
    for mode in modes:
        sec = statistics.median(times[mode])
        row[f"{mode}_batch_bytes"] = nbytes[mode]
        row[f"{mode}_batches_per_s"] = n / sec
        row[f"{mode}_MB_per_s"] = n * nbytes[mode] / sec / 1e6
        row[f"{mode}_env_steps_per_s"] = n * T * N / sec
        row[f"{mode}_runs_s"] = times[mode]
    return row


def frames_markdown(result: dict[str, Any]) -> str:
    sz = result["sizes"]
    lines = [
        "# Transport benchmark: Atari stacks, obs layout (1.1) vs frames layout (1.2)",
        "",
        f"Median of {result['runs']} runs, the four modes interleaved (order alternating), "
        f"{result['messages_per_run']} batches a run after warm-up; sender in a separate "
        f"process; HWM {result['hwm']}. ppomq = encode (incl. finding the frames) + send + "
        "recv + decode + validate (incl. the rebuilding gather); raw = ZeroMQ multipart of "
        "the same bytes, `copy=False`. Batches: T=128, N=8, uint8 [4, 84, 84] stacks as "
        "FrameStackObservation makes them (one new frame a step, 2% resets). "
        f"libzmq {result['zmq']}, pyzmq {result['pyzmq']}, {result['machine']['platform']}, "
        f"{result['machine']['cpus']} CPUs shared with other work.",
        "",
        f"Bytes per env step (obs part): **{sz['obs_bytes_per_env_step']:,.0f}** as `obs` → "
        f"**{sz['frames_bytes_per_env_step']:,.0f}** as frames (K = {sz['frames_K']} frames "
        f"for {T * N} steps, + 16 index bytes a step): **{sz['ratio']:.2f}× fewer**. "
        f"Finding the frames (encode side): {result['timings']['to_frames_ms']:.1f} ms a batch.",
        "",
        "| transport | mode | MB/batch | batches/s | MB/s | env steps/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    names = {"ppomq_obs": "ppomq, obs (1.1)", "ppomq": "ppomq, frames (1.2)",
             "raw_obs": "raw ZeroMQ, obs bytes", "raw": "raw ZeroMQ, frames bytes"}  # fmt: skip
    for row in result["rows"]:
        for mode, label in names.items():
            lines.append(
                f"| {row['transport']} | {label} | {row[f'{mode}_batch_bytes'] / 1e6:.3f} | "
                f"{row[f'{mode}_batches_per_s']:,.1f} | {row[f'{mode}_MB_per_s']:,.0f} | "
                f"{row[f'{mode}_env_steps_per_s']:,.0f} |"
            )
    lines += ["", "Batches/s after ÷ before (ppomq): " + ", ".join(
        f"{r['transport']} {r['ppomq_batches_per_s'] / r['ppomq_obs_batches_per_s']:.2f}×"
        for r in result["rows"]
    ) + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _curve_keys(tmp: str) -> tuple[CurveServer, CurveClient]:
    """A server pair and one allowed client pair, as `ppomq keys generate` writes them."""
    import zmq.auth

    from ppomq.commands.keys import generate

    generate(Path(tmp) / "keys", 1)
    keys = Path(tmp) / "keys"
    spub, ssec = zmq.auth.load_certificate(keys / "server.key_secret")
    cpub, csec = zmq.auth.load_certificate(keys / "actors" / "actor-0.key_secret")
    assert ssec is not None and csec is not None
    return (
        CurveServer(public=spub, secret=ssec, allowed_dir=str(keys / "allowed")),
        CurveClient(public=cpub, secret=csec, server_public=spub),
    )


def curve_main(runs: int, bench_run: harness.Run) -> None:
    """CURVE on vs off over tcp loopback, interleaved run by run, median of `runs`."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=sender_main, args=(child,), daemon=True)
    proc.start()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ppomq-bench-", dir="/tmp") as tmp:
        keys = _curve_keys(tmp)
        for key in SIZES:
            modes = ("ppomq", "curve")
            row = measure_pair(parent, "tcp://127.0.0.1:0", modes, key, runs, keys)
            row.update(measure_latency(parent, "tcp://127.0.0.1:0", modes, key, runs, keys))
            row["transport"] = "tcp"
            row["ratio"] = row["curve_batches_per_s"] / row["ppomq_batches_per_s"]
            row["added_ms_per_batch"] = row["curve_ms_per_batch"] - row["ppomq_ms_per_batch"]
            row["added_latency_ms"] = row["curve_latency_ms"] - row["ppomq_latency_ms"]
            rows.append(row)
            print(
                f"{key:9s} tcp: off {row['ppomq_batches_per_s']:9.1f}/s "
                f"{row['ppomq_latency_ms']:.2f} ms; CURVE {row['curve_batches_per_s']:9.1f}/s "
                f"{row['curve_latency_ms']:.2f} ms; ratio {row['ratio']:.3f}",
                flush=True,
            )
    parent.send(None)
    proc.join(10)
    result = {
        "command": bench_run.command,
        "date": harness.utc_now(),
        "machine": harness.machine(),
        "zmq": zmq.zmq_version(),
        "pyzmq": zmq.__version__,
        "curve": zmq.has("curve"),
        "runs": runs,
        "hwm": HWM,
        "rows": rows,
    }  # fmt: skip
    print(
        harness.write_results(
            harness.RESULTS, "transport_curve", result, curve_markdown(result), bench_run
        )
    )


def curve_markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Transport benchmark: CURVE on vs off",
        "",
        "`.venv/bin/python -m benchmarks.transport --curve --runs "
        f"{result['runs']}`. Median of {result['runs']} interleaved runs over tcp loopback; "
        f"sender in a separate process; HWM {result['hwm']}. Both: encode + send + recv + "
        "decode + validate; CURVE adds the encryption of every frame on both ends and the "
        "learner's actor-id-vs-key check. Throughput: batches back to back (up to HWM in "
        "flight); latency: one batch in flight, from just before its encode to the end of "
        "its decode, median (and p90) of each run, median over runs. The Atari stacks go in "
        "ROLLOUT 1.2's frames layout, what ppomq sends for Atari; the plain Atari row is the "
        "same shape with every frame distinct (the `obs` layout's bytes). "
        f"libzmq {result['zmq']}, pyzmq {result['pyzmq']}, {result['machine']['platform']}, "
        f"{result['machine']['cpus']} CPUs.",
        "",
        "| batch | MB/batch | off batches/s | off MB/s | CURVE batches/s | CURVE MB/s "
        "| CURVE/off | added ms/batch | off latency ms (p90) | CURVE latency ms (p90) "
        "| added latency ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        latency = (
            f"| {r['ppomq_latency_ms']:.2f} ({r['ppomq_latency_p90_ms']:.2f}) "
            f"| {r['curve_latency_ms']:.2f} ({r['curve_latency_p90_ms']:.2f}) "
            f"| {r['added_latency_ms']:.2f} |"
            if "added_latency_ms" in r
            else "| | | |"
        )
        lines.append(
            f"| {r['label']} | {r['batch_bytes'] / 1e6:.3f} "
            f"| {r['ppomq_batches_per_s']:,.0f} | {r['ppomq_MB_per_s']:,.0f} "
            f"| {r['curve_batches_per_s']:,.0f} | {r['curve_MB_per_s']:,.0f} "
            f"| {r['ratio']:.2f} | {r['added_ms_per_batch']:.3f} " + latency
        )
    lines.append("")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Transport benchmark",
        "",
        f"Median of {result['runs']} interleaved runs; sender in a separate process; both "
        f"modes with HWM {result['hwm']}. ppomq = encode + send + recv + decode + validate; "
        "raw = ZeroMQ multipart of the same bytes, `copy=False` on both ends. "
        f"libzmq {result['zmq']}, pyzmq {result['pyzmq']}, {result['machine']['platform']}.",
        "",
        "| batch | transport | MB/batch | ppomq batches/s | ppomq MB/s "
        "| raw batches/s | raw MB/s | ppomq/raw |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['label']} | {r['transport']} | {r['batch_bytes'] / 1e6:.3f} "
            f"| {r['ppomq_batches_per_s']:,.0f} | {r['ppomq_MB_per_s']:,.0f} "
            f"| {r['raw_batches_per_s']:,.0f} | {r['raw_MB_per_s']:,.0f} | {r['ratio']:.2f} |"
        )
    c = result["codec_cartpole"]
    lines += [
        "",
        "Codec overhead per CartPole-size batch (in process, median): "
        f"encode {c['encode_us']:.1f} us + decode/validate {c['decode_validate_us']:.1f} us "
        f"= **{c['total_us']:.1f} us** (best run {c['best_run_total_us']:.1f} us).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
