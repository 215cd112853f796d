"""`ppomq actor`: the shell around EnvRunner — fetch weights, sample, send, repeat.

Wiring: settings -> logging -> env -> weightserver client + rollout sender -> wait for the
first weights -> loop. Stopping: the first SIGTERM/SIGINT finishes (and sends) the current
rollout and exits 143/130 (128 + the signal: stopped before the run's end); a second exits
at once. Exit 0 only when the weightserver said the run has finished. A learner that is
away only makes `send` wait (bounded by the high-water mark); the actor reconnects by itself
when it is back.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ppomq.actor.policy_sync import WeightsPrefetcher
from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.core.metrics import ActorMetrics, Heartbeat
from ppomq.core.models import InferencePolicy
from ppomq.core.service_shell import service_shell
from ppomq.core.settings import ActorSettings
from ppomq.core.signals import WarmStop
from ppomq.core.transport.curvezmq import (
    CurveClient,
    client_from_settings,
    key_suffix,
    last_client_failure,
)
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.core.transport.weights_client import WeightsClient
from ppomq.proto import encode

log = logging.getLogger("ppomq.actor")

# Waits for weights and for room to send run in slices this long, checking for a stop
# between them: a signal's handler runs during such a wait but cannot end it, and at a
# run's end (the learner finished, so no weights or room will come) an actor must notice
# its SIGTERM at once. A stopping actor so gives its last batch one slice to leave.
STOP_POLL_S = 0.02
SEND_SLICE_MS = 50
# An actor whose batch no learner takes says so this often (it goes on waiting).
SEND_WAIT_LOG_S = 30.0


def new_actor_id(actor_index: int, curve: CurveClient | None = None) -> str:
    """Unique per process incarnation: a restarted actor starts a fresh `seq` sequence.
    Under CURVE it ends with its key's suffix, which the learner checks
    (ppomq.core.transport.curvezmq)."""
    suffix = key_suffix(curve.public) if curve is not None else ""
    return f"a{actor_index}-{os.getpid()}-{secrets.token_hex(3)}{suffix}"


class Stopped(Exception):
    """Asked to stop while waiting for weights."""


class RunFinished(Exception):
    """The weightserver says the run has finished: no newer weights will come."""


def flow_limit(actor_map: Mapping[str, Any], *, sync: bool) -> int:
    """Batches per version the weights header allows (proto/WEIGHTS.md `actor`); sync
    actors send one. A value that is not a count falls back to one."""
    value = actor_map.get("batches_per_version", 1)
    if sync:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        log.warning("ignoring actor.batches_per_version %r (not a count >= 0): using 1", value)
        return 1
    return value


def actor_index_of(settings: ActorSettings) -> int:
    """The configured index, else one derived from the hostname: compose and k8s replicas
    have distinct hostnames but no index, and their env seeds must still differ."""
    if settings.actor_index is not None:
        return settings.actor_index
    return zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF


def run_actor(settings: ActorSettings) -> int:
    finished = False
    # The liveness probe's /healthz reads it: the main loop beats each time round and in
    # every slice of its waits, so a loop stuck anywhere (an env step that hangs) stops it.
    heartbeat = Heartbeat()
    with service_shell(
        "actor", metrics_port=settings.metrics_port, unit_of_work="the current rollout",
        heartbeat=heartbeat,
    ) as stop:  # fmt: skip
        finished = _act(settings, stop, heartbeat)
    return stop.exit_code(finished=finished)


def _act(settings: ActorSettings, stop: WarmStop, heartbeat: Heartbeat | None = None) -> bool:
    """Sample and send until stopped or the run has finished; True when it finished."""
    beat = heartbeat.beat if heartbeat is not None else lambda: None
    torch.set_num_threads(1)  # many actors share the cores; one thread each is fastest
    s = settings
    curve = client_from_settings(s)  # a bad key file: one line, exit 2, before any env
    index = actor_index_of(s)
    metrics = ActorMetrics()
    torch.manual_seed(env_seed(s.seed, index, 1 << 20))
    spec = rollout_spec_for(
        s.env_id, run_id=s.run_id, num_steps=s.num_steps, max_bytes=s.max_message_bytes
    )
    seeds = [env_seed(s.seed, index, i) for i in range(s.num_envs)]
    envs = make_vector_env(s.env_id, s.num_envs, seeds, s.vectorization, s.env_backend)
    actor_id = new_actor_id(index, curve)
    runner = EnvRunner(envs=envs, spec=spec, run_id=s.run_id, actor_id=actor_id, env_id=s.env_id)
    weights = WeightsPrefetcher(
        WeightsClient(s.weightserver_addr, timeout_ms=s.weights_timeout_ms, curve=curve)
    )
    policy: InferencePolicy | None = None
    version = -1
    sender = RolloutSender(
        s.learner_addr,
        hwm=s.rollout_hwm,
        heartbeat_ivl_ms=s.heartbeat_ivl_ms,
        heartbeat_timeout_ms=s.heartbeat_timeout_ms,
        max_message_bytes=s.max_message_bytes,
        curve=curve,
    )
    log.info(
        "actor %s: %d x %s, T=%d -> %s%s", actor_id, s.num_envs, s.env_id, s.num_steps,
        s.learner_addr, " (CURVE)" if curve else "",
    )  # fmt: skip
    seq = 0
    sent_at_version = 0
    # Flow control: at most `limit` batches per policy version, then wait for a newer one
    # (0: never wait). The learner sets it in each weights header (batches_per_version);
    # until the first weights, and from learners that do not say, one.
    limit = 1
    last_report = time.monotonic()
    finished = False
    try:
        while not stop.requested and not (finished := weights.finished):
            beat()
            must_exceed = version if limit and sent_at_version >= limit else -1
            t_weights = time.perf_counter()
            try:
                got = refresh_weights(
                    weights, version, stop, need_new=version <= must_exceed,
                    resend_after_s=s.resend_after_s, beat=beat,
                )  # fmt: skip
            except Stopped:
                break
            except RunFinished:
                finished = True
                break
            finally:
                metrics.add_time("weights", time.perf_counter() - t_weights)
            if got is not None:
                version, policy, actor_map = got
                sent_at_version = 0
                # What the learner asks actors to do outside the network comes with each
                # version; reward statistics carry on while its settings stay the same.
                limit = flow_limit(actor_map, sync=s.mode == "sync")
                reward_norm = actor_map.get("reward_norm")
                if runner.configure_rewards(reward_norm):
                    log.info("actor %s: reward normalization %s from v%d", actor_id,
                             reward_norm or "off", version)  # fmt: skip
            assert policy is not None
            if runner.env_steps == 0:
                # Start-up time is measured to here (benchmarks/e2e.py reads this line).
                log.info("first env step at unix %.6f", time.time())
            t_sample = time.perf_counter()
            batch = runner.sample(policy, policy_version=version, seq=seq)
            t_send = time.perf_counter()
            metrics.add_time("sample", t_send - t_sample)
            batch.sent = seq + 1  # rollout ledger (ROLLOUT.md `sent`): sent, this one included
            beat()
            frames = encode(batch)
            # Short waits, for the same reason: a learner that has finished takes no batch.
            send_since = last_said = time.monotonic()
            while not sender.send(frames, timeout_ms=SEND_SLICE_MS):
                beat()  # waiting for a learner that is away: alive, a restart would not help
                if time.monotonic() - last_said >= SEND_WAIT_LOG_S:
                    last_said = time.monotonic()
                    log.warning("actor %s: the learner at %s has taken no batch for %.0f s; "
                                "waiting (a learner restarting, or the run is over and its "
                                "weightserver gone: stop this actor)", actor_id,
                                s.learner_addr, last_said - send_since)  # fmt: skip
                if stop.requested or weights.finished:
                    break  # the learner is not taking batches: told to stop, or it is done
            else:
                seq += 1
                sent_at_version += 1
                metrics.record_batch(
                    env_steps=batch.num_steps * batch.num_envs, policy_version=version
                )
            metrics.add_time("send", time.perf_counter() - t_send)
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                log.info("actor %s: %d batches, %d env steps, policy v%d; time: %s", actor_id,
                         seq, runner.env_steps, version, metrics.time_split())  # fmt: skip
    finally:
        sender.close()
        weights.close()
        envs.close()
    # A stop signal that came after the weightserver said the run finished stops a finished
    # run: exit 0 as well.
    finished = finished or weights.finished
    if finished:
        log.info("run %r finished: actor %s exiting after %d batches", s.run_id, actor_id, seq)
    else:
        log.info("actor %s stopped after %d batches", actor_id, seq)
    log.info("actor %s time: %s", actor_id, metrics.time_split())
    return finished


def refresh_weights(
    weights: WeightsPrefetcher,
    version: int,
    stop: WarmStop,
    *,
    need_new: bool,
    resend_after_s: float | None = None,
    beat: Callable[[], None] = lambda: None,
) -> tuple[int, InferencePolicy, dict[str, Any]] | None:
    """The newest loaded (version, policy, actor map) if newer than `version`, else None;
    blocks until there is a newer one when we hold none (`version` -1) or `need_new`.
    A `need_new` wait ends with None after `resend_after_s`: the learner may have lost our
    last batch (it restarted, or the network dropped it) and be waiting for one.
    Raises `Stopped` when asked to stop while waiting, `RunFinished` when the run has
    finished (the weightserver said so) and nothing newer will come. Calls `beat` in every
    slice of its wait: waiting for weights is the main loop turning, not a hang."""
    must_wait = need_new or version < 0
    waited_since = time.monotonic()
    warned = False
    while True:
        # Short waits: the stop signal's handler runs during the wait but cannot end it,
        # and an actor waiting for weights that will never come (the learner has finished)
        # must notice its SIGTERM at once, not a second later.
        got = weights.newest(version, timeout_s=STOP_POLL_S if must_wait else 0.0)
        beat()
        if got is not None or not must_wait:
            return got
        if stop.requested:
            raise Stopped
        if weights.finished:
            raise RunFinished
        waited = time.monotonic() - waited_since
        if version >= 0 and resend_after_s is not None and waited > resend_after_s:
            log.info("no version newer than v%d for %.0f s: sending another batch with it",
                     version, waited)  # fmt: skip
            return None
        if not warned and waited > 10:
            warned = True
            # A refused key looks like a silent weightserver: say the handshake's cause too.
            cause = last_client_failure()
            log.warning("still waiting for weights newer than v%d from the weightserver%s",
                        version, f"; {cause}" if cause else "")  # fmt: skip
