"""`ppomq actor`: the shell around EnvRunner — fetch weights, sample, send, repeat.

Wiring: settings -> logging -> identity -> env -> weights prefetcher + rollout sender ->
wait for the first weights -> loop. Its parts: identity.py (index and id), runner.py
(sampling), reward_norm.py, policy_sync.py (weights), flow_control.py (batches per
version), batch_shape.py (the learner's num_steps), sending.py (handing a batch to the
learner).

Stopping: the first SIGTERM/SIGINT finishes (and sends) the current rollout and exits
143/130 (128 + the signal: stopped before the run's end); a second exits at once. Exit 0
only when the weightserver said the run has finished. A learner that is away only makes
`send` wait (bounded by the high-water mark); the actor reconnects by itself when it is
back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from ppomq.actor.batch_shape import check_num_steps
from ppomq.actor.flow_control import FlowControl
from ppomq.actor.identity import actor_index_of, new_actor_id
from ppomq.actor.policy_sync import RunFinished, Stopped, WeightsPrefetcher, refresh_weights
from ppomq.actor.routing import rollout_endpoint
from ppomq.actor.runner import EnvRunner
from ppomq.actor.sending import send_until_taken
from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.core.events import EventWriter, events_writer
from ppomq.core.metrics import ActorMetrics, Heartbeat
from ppomq.core.models import InferencePolicy
from ppomq.core.service_shell import service_shell
from ppomq.core.settings import ActorSettings
from ppomq.core.signals import WarmStop
from ppomq.core.transport.curvezmq import client_from_settings
from ppomq.core.transport.rollouts import RolloutSender
from ppomq.core.transport.weights_client import WeightsClient
from ppomq.proto import encode, encode_hello

log = logging.getLogger("ppomq.actor")

# How often a running actor logs its counts and where its time went.
REPORT_EVERY_S = 10.0


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
    torch.set_num_threads(1)  # many actors share the cores; one thread each is fastest
    s = settings
    curve = client_from_settings(s)  # a bad key file: one line, exit 2, before any env
    index = actor_index_of(s)
    torch.manual_seed(env_seed(s.seed, index, 1 << 20))
    spec = rollout_spec_for(
        s.env_id, run_id=s.run_id, num_steps=s.num_steps, max_bytes=s.max_message_bytes
    )
    seeds = [env_seed(s.seed, index, i) for i in range(s.num_envs)]
    envs = make_vector_env(s.env_id, s.num_envs, seeds, s.vectorization, s.env_backend)
    actor_id = new_actor_id(index, curve)

    def connect(endpoint: str) -> RolloutSender:
        return RolloutSender(
            endpoint,
            hwm=s.rollout_hwm,
            heartbeat_ivl_ms=s.heartbeat_ivl_ms,
            heartbeat_timeout_ms=s.heartbeat_timeout_ms,
            max_message_bytes=s.max_message_bytes,
            curve=curve,
        )

    loop = ActorLoop(
        settings=s,
        actor_id=actor_id,
        index=index,
        runner=EnvRunner(envs=envs, spec=spec, run_id=s.run_id, actor_id=actor_id, env_id=s.env_id),
        weights=WeightsPrefetcher(
            WeightsClient(s.weightserver_addr, timeout_ms=s.weights_timeout_ms, curve=curve)
        ),
        connect=connect,
        events=events_writer(s, f"actor-{index}"),
        stop=stop,
        beat=heartbeat.beat if heartbeat is not None else lambda: None,
    )
    log.info(
        "actor %s: %d x %s, T=%d -> %s%s", actor_id, s.num_envs, s.env_id, s.num_steps,
        s.learner_addr, " (CURVE)" if curve else "",
    )  # fmt: skip
    try:
        finished = loop.run()
    finally:
        loop.sender.close()
        loop.weights.close()
        envs.close()
    return loop.stopped(finished)


class ActorLoop:
    """Weights in, rollouts out: one rollout per turn, sent once the policy is current
    enough for the learner's flow control."""

    def __init__(
        self,
        *,
        settings: ActorSettings,
        actor_id: str,
        index: int,
        runner: EnvRunner,
        weights: WeightsPrefetcher,
        connect: Callable[[str], RolloutSender],
        events: EventWriter,
        stop: WarmStop,
        beat: Callable[[], None],
    ) -> None:
        self.s = settings
        self.actor_id = actor_id
        self.runner = runner
        self.weights = weights
        # The rollout socket, to --learner-addr until the weights name a learner group's
        # rank for this actor (routing.py); `connect` makes one for an endpoint.
        self.index = index
        self.connect = connect
        self.sender = connect(settings.learner_addr)
        self.events = events
        self.stop = stop
        self.beat = beat
        self.metrics = ActorMetrics()
        self.flow = FlowControl(
            sync=settings.mode == "sync", resend_after_s=settings.resend_after_s,
            actor_id=actor_id,
        )  # fmt: skip
        self.policy: InferencePolicy | None = None
        self.version = -1
        self.seq = 0  # batches the learner has taken
        self._reported_at = time.monotonic()

    def run(self) -> bool:
        """Until stopped or the run has finished; True when it finished."""
        while not self.stop.requested and not self.weights.finished:
            self.beat()
            try:
                new = self._refresh()
            except Stopped:
                return False
            except RunFinished:
                return True
            if new and self.flow.must_wait_for_new:
                continue  # granted nothing with this version: wait for the next one
            self._sample_and_send()
            if time.monotonic() - self._reported_at > REPORT_EVERY_S:
                self._reported_at = time.monotonic()
                log.info("actor %s: %d batches, %d env steps, policy v%d; time: %s",
                         self.actor_id, self.seq, self.runner.env_steps, self.version,
                         self.metrics.time_split())  # fmt: skip
        return self.weights.finished

    def _refresh(self) -> bool:
        """Take the newest weights (waiting for a new version when flow control says so),
        and what the learner asks of actors with them; True when a new version came."""
        t0 = time.perf_counter()
        try:
            got = refresh_weights(
                self.weights, self.version, self.stop, need_new=self.flow.must_wait_for_new,
                resend_after_s=self.flow.resend_after_s, beat=self._beat_or_hello,
            )  # fmt: skip
        finally:
            self.metrics.add_time("weights", time.perf_counter() - t0)
        if got is None:
            return False
        self.version, self.policy, actor_map = got
        check_num_steps(actor_map, self.s.num_steps)
        self.flow.new_version(actor_map)
        self._route(actor_map)
        # What the learner asks actors to do outside the network comes with each version;
        # reward statistics carry on while its settings stay the same.
        reward_norm = actor_map.get("reward_norm")
        if self.runner.configure_rewards(reward_norm):
            log.info("actor %s: reward normalization %s from v%d", self.actor_id,
                     reward_norm or "off", self.version)  # fmt: skip
        return True

    def _beat_or_hello(self) -> None:
        """While it waits for weights: alive to its supervisor, and when it holds no
        grant, there to the learner (flow_control.py)."""
        self.beat()
        if self.version >= 0 and self.flow.hello_due():
            # Never waits: a hello the learner cannot take now is said again shortly.
            self.sender.send(encode_hello(run_id=self.s.run_id, actor_id=self.actor_id), 1)

    def _route(self, actor_map: dict[str, Any]) -> None:
        """Send to the learner the weights name for this actor, reconnecting if it moved.
        Batches queued for the old one may be lost; the ledger counts them in flight."""
        endpoint, rank = rollout_endpoint(actor_map, self.index, self.s.learner_addr)
        if endpoint == self.sender.endpoint:
            return
        self.sender.close()
        self.sender = self.connect(endpoint)
        where = "" if rank is None else f" (learner rank {rank} of {len(actor_map['learners'])})"
        log.info("actor %s: sending rollouts to %s%s", self.actor_id, endpoint, where)

    def _sample_and_send(self) -> None:
        assert self.policy is not None
        runner = self.runner
        if runner.env_steps == 0:
            # Start-up ends here: the launcher's timeline and the benchmarks read it.
            self.events.emit("actor.first_step", actor_id=self.actor_id)
            log.info("actor %s: first env step", self.actor_id)
        t_sample = time.perf_counter()
        batch = runner.sample(self.policy, policy_version=self.version, seq=self.seq)
        t_send = time.perf_counter()
        self.metrics.add_time("sample", t_send - t_sample)
        batch.sent = self.seq + 1  # rollout ledger (ROLLOUT.md `sent`): this one included
        batch.weights_wait = self.metrics.weights_share_since_mark()  # ROLLOUT.md `weights_wait`
        self.beat()
        taken = send_until_taken(
            self.sender, encode(batch), give_up=self._give_up_sending, beat=self.beat,
            actor_id=self.actor_id,
        )  # fmt: skip
        if taken:
            self.seq += 1
            self.flow.sent()
            self.metrics.record_batch(
                env_steps=batch.num_steps * batch.num_envs, policy_version=self.version
            )
        self.metrics.add_time("send", time.perf_counter() - t_send)

    def _give_up_sending(self) -> bool:
        # The learner is not taking batches: told to stop, or the run is done.
        return self.stop.requested or self.weights.finished

    def stopped(self, finished: bool) -> bool:
        """Say how the actor ended; True when its run finished. A stop signal that came
        after the weightserver said the run finished stops a finished run: exit 0 too."""
        finished = finished or self.weights.finished
        if finished:
            log.info("run %r finished: actor %s exiting after %d batches", self.s.run_id,
                     self.actor_id, self.seq)  # fmt: skip
        else:
            log.info("actor %s stopped after %d batches", self.actor_id, self.seq)
        log.info("actor %s time: %s", self.actor_id, self.metrics.time_split())
        self.events.emit("actor.stop", actor_id=self.actor_id, batches=self.seq,
                         finished=finished, seconds=dict(self.metrics.phase_s))  # fmt: skip
        self.events.close()
        return finished
