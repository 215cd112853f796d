"""`ppomq actor`: the shell around EnvRunner — fetch weights, sample, send, repeat.

Wiring: settings -> logging -> env -> weightserver client + rollout sender -> wait for the
first weights -> loop. Stopping: the first SIGTERM/SIGINT finishes (and sends) the current
rollout and exits 0; a second exits at once. A learner that is away only makes `send`
wait (bounded by the high-water mark); the actor reconnects by itself when it is back.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
import zlib
from typing import Any

import torch

from ppomq.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.errors import UsageError
from ppomq.metrics import ActorMetrics, start_metrics_server
from ppomq.policy import ActorCritic, InferencePolicy, load_numpy_state
from ppomq.proto import WeightsHeader, encode, unpack_tensors
from ppomq.settings import ActorSettings
from ppomq.signals import WarmStop
from ppomq.transport import RolloutSender
from ppomq.weightserver.client import WeightsClient

from .runner import EnvRunner

log = logging.getLogger("ppomq.actor")


def new_actor_id(actor_index: int) -> str:
    """Unique per process incarnation: a restarted actor starts a fresh `seq` sequence."""
    return f"a{actor_index}-{os.getpid()}-{secrets.token_hex(3)}"


class PolicyHolder:
    """The actor's copy of the policy and the version it came from."""

    def __init__(self) -> None:
        self.policy: ActorCritic | None = None
        self.inference: InferencePolicy | None = None
        self.version = -1

    def load(self, header: WeightsHeader, blob: Any) -> None:
        if self.policy is None or self.policy.spec != header.model:
            self.policy = ActorCritic(header.model)
        load_numpy_state(self.policy, unpack_tensors(header, blob))
        self.inference = InferencePolicy(self.policy)
        self.version = header.version


def actor_index_of(settings: ActorSettings) -> int:
    """The configured index, else one derived from the hostname: compose and k8s replicas
    have distinct hostnames but no index, and their env seeds must still differ."""
    if settings.actor_index is not None:
        return settings.actor_index
    return zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF


def run_actor(settings: ActorSettings) -> int:
    torch.set_num_threads(1)  # many actors share the cores; one thread each is fastest
    s = settings
    index = actor_index_of(s)
    try:
        start_metrics_server(s.metrics_port)
    except OSError as exc:
        raise UsageError(str(exc)) from None
    metrics = ActorMetrics()
    torch.manual_seed(env_seed(s.seed, index, 1 << 20))
    stop = WarmStop("the current rollout").install()
    spec = rollout_spec_for(
        s.env_id, run_id=s.run_id, num_steps=s.num_steps, max_bytes=s.max_message_bytes
    )
    seeds = [env_seed(s.seed, index, i) for i in range(s.num_envs)]
    envs = make_vector_env(s.env_id, s.num_envs, seeds, s.vectorization)
    actor_id = new_actor_id(index)
    runner = EnvRunner(envs=envs, spec=spec, run_id=s.run_id, actor_id=actor_id, env_id=s.env_id)
    holder = PolicyHolder()
    client = WeightsClient(s.weightserver_addr, timeout_ms=s.weights_timeout_ms)
    sender = RolloutSender(
        s.learner_addr,
        hwm=s.rollout_hwm,
        heartbeat_ivl_ms=s.heartbeat_ivl_ms,
        heartbeat_timeout_ms=s.heartbeat_timeout_ms,
        max_message_bytes=s.max_message_bytes,
    )
    log.info(
        "actor %s: %d x %s, T=%d -> %s", actor_id, s.num_envs, s.env_id, s.num_steps, s.learner_addr
    )
    seq = 0
    sent_at_version = 0
    # Flow control: at most `limit` batches per policy version, then wait for a newer one.
    # Actors that outrun the learner would only produce batches the staleness gate drops.
    limit = 1 if s.mode == "sync" else s.batches_per_version
    last_report = time.monotonic()
    try:
        while not stop.requested:
            must_exceed = holder.version if limit and sent_at_version >= limit else -1
            held = holder.version
            if not refresh_weights(client, holder, stop, must_exceed=must_exceed):
                break
            if holder.version != held:
                sent_at_version = 0
            assert holder.inference is not None
            if runner.env_steps == 0:
                # Start-up time is measured to here (benchmarks/e2e.py reads this line).
                log.info("first env step at unix %.6f", time.time())
            batch = runner.sample(holder.inference, policy_version=holder.version, seq=seq)
            frames = encode(batch)
            while not sender.send(frames, timeout_ms=500):
                if stop.requested:
                    break  # the learner is not taking batches and we were told to stop
            else:
                seq += 1
                sent_at_version += 1
                metrics.record_batch(
                    env_steps=batch.num_steps * batch.num_envs, policy_version=holder.version
                )
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                log.info("actor %s: %d batches, %d env steps, policy v%d", actor_id, seq,
                         runner.env_steps, holder.version)  # fmt: skip
    finally:
        sender.close()
        client.close()
        envs.close()
    log.info("actor %s stopped after %d batches", actor_id, seq)
    return 0


def refresh_weights(
    client: WeightsClient, holder: PolicyHolder, stop: WarmStop, *, must_exceed: int
) -> bool:
    """Load newer weights if there are any; block until there are when we hold none (or
    fewer than `must_exceed`). False when asked to stop while waiting."""
    need_new = holder.policy is None or holder.version <= must_exceed
    waited_since = time.monotonic()
    warned = False
    while True:
        try:
            got = client.get_newer(holder.version, wait_ms=1000 if need_new else 0)
        except TimeoutError:
            got = None
            if not need_new:
                return True  # weightserver slow or away: keep acting on the policy we hold
        if got is not None:
            holder.load(*got)
            return True
        if not need_new:
            return True
        if stop.requested:
            return False
        if not warned and time.monotonic() - waited_since > 10:
            warned = True
            log.warning(
                "still waiting for weights newer than v%d from the weightserver", holder.version
            )
