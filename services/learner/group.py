"""A learner group: W learner processes that train one policy together (DD-PPO).

Each rank trains on the batches of its own actors; at every minibatch step the ranks
average their gradients with one all-reduce, so every rank takes the same optimizer step
and holds the same parameters after it, with no parameter server. The group is a
torch.distributed process group (gloo on CPU, NCCL on CUDA), started the way PyTorch
starts any multi-process training: torchrun's environment (`RANK`, `WORLD_SIZE`,
`MASTER_ADDR`, `MASTER_PORT`).

A group never hangs on a lost rank: every collective has --group-timeout-s, and a
heartbeat through the rendezvous store notices a rank that stopped (dead or stuck) in as
long while the others wait outside a collective. Then every rank exits (GroupLostError,
exit 6) and the group starts again together from rank 0's last checkpoint, as torchrun's,
RLlib's and Kubernetes' gang restarts do.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from ppomq.core.errors import UsageError, UserError

log = logging.getLogger("ppomq.learner")

T = TypeVar("T")

# How often each rank's heartbeat reaches the store, and looks at the others'.
HEARTBEAT_S = 1.0
# A rank started before rank 0 waits this long for the rendezvous (pods start in any order).
RENDEZVOUS_S = 300.0


class GroupLostError(UserError):
    """A rank of the learner group died or stopped answering (exit 6): every rank exits,
    and the group is started again together (it resumes from rank 0's checkpoint)."""

    exit_code = 6


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """Where this process stands in its group, from torchrun's environment."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    local_rank: int = 0
    # torchrun's agent hosts the rendezvous store itself (TORCHELASTIC_USE_AGENT_STORE):
    # then no rank creates it.
    agent_store: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> GroupSpec | None:
        """None for a learner alone (WORLD_SIZE unset or 1); a UsageError in one line for
        a contract half given or out of range."""
        world = environ.get("WORLD_SIZE", "").strip()
        if world in ("", "1"):
            return None
        missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not environ.get(k)]
        if missing:
            raise UsageError(
                f"WORLD_SIZE={world} but {', '.join(missing)} unset: a learner group needs "
                "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun sets them), or "
                "WORLD_SIZE unset for a learner alone"
            )
        try:
            spec = cls(
                rank=int(environ["RANK"]),
                world_size=int(world),
                master_addr=environ["MASTER_ADDR"],
                master_port=int(environ["MASTER_PORT"]),
                local_rank=int(environ.get("LOCAL_RANK", "0") or 0),
                agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
            )
        except ValueError as exc:
            raise UsageError(f"a learner group's environment: {exc} (RANK, WORLD_SIZE, "
                             "MASTER_PORT and LOCAL_RANK are integers)") from None  # fmt: skip
        if not 0 <= spec.rank < spec.world_size:
            raise UsageError(f"RANK={spec.rank} is not in 0..{spec.world_size - 1} (WORLD_SIZE)")
        return spec


def pick_backend(choice: str, device: torch.device) -> str:
    """--group-backend: `auto` is NCCL for a CUDA learner, gloo otherwise."""
    if choice != "auto":
        return choice
    return "nccl" if device.type == "cuda" else "gloo"


class LearnerGroup:
    """This process's membership: the collectives the learner runs, each bounded by
    `timeout_s`, and the heartbeat that notices a lost rank outside them."""

    def __init__(
        self, spec: GroupSpec, *, backend: str, timeout_s: float, device: torch.device
    ) -> None:
        self.spec = spec
        self.rank, self.world_size = spec.rank, spec.world_size
        self.timeout_s = timeout_s
        self.device = device
        is_master = spec.rank == 0 and not spec.agent_store
        log.info("learner rank %d of %d: rendezvous at %s:%d (%s)", spec.rank, spec.world_size,
                 spec.master_addr, spec.master_port, backend)  # fmt: skip
        # torch's own connect retries can outlast any timeout given to them: a rank whose
        # rank 0 never comes exits here, in one line, for its supervisor to start again.
        watchdog = threading.Timer(RENDEZVOUS_S, _rendezvous_failed, args=(spec,))
        watchdog.daemon = True
        watchdog.start()
        try:
            self.store = dist.TCPStore(
                spec.master_addr, spec.master_port, spec.world_size, is_master,
                timeout=timedelta(seconds=RENDEZVOUS_S), wait_for_workers=False,
            )  # fmt: skip
            dist.init_process_group(
                backend, store=self.store, rank=spec.rank, world_size=spec.world_size,
                timeout=timedelta(seconds=timeout_s),
            )  # fmt: skip
        except RuntimeError as exc:
            raise GroupLostError(
                f"learner rank {spec.rank}: the group at {spec.master_addr}:{spec.master_port} "
                f"did not form ({_first_line(exc)}); check that every rank runs with the "
                "same WORLD_SIZE, MASTER_ADDR and MASTER_PORT"
            ) from None
        finally:
            watchdog.cancel()
        self.store.set_timeout(timedelta(seconds=timeout_s))
        self._lost: str | None = None
        # Each other rank's heartbeat count and when it last moved (the heartbeat's).
        self._seen: dict[int, tuple[int, float]] = {}
        # Seconds spent in collectives, waits for the slowest rank included.
        self.comm_s = 0.0
        self._buffers: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        self._closed = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="group-heartbeat", daemon=True)
        self._heartbeat.start()
        log.info("learner rank %d joined the group of %d", self.rank, self.world_size)

    @property
    def lead(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ liveness

    def _beat(self) -> None:
        """Bump this rank's counter in the store and watch the others'; a counter that
        has not moved for timeout_s (a rank dead, or stopped) marks the group lost. Its
        own store connection: the main thread may be blocked in a collective."""
        spec = self.spec
        try:
            store = dist.TCPStore(
                spec.master_addr, spec.master_port, spec.world_size, False,
                timeout=timedelta(seconds=self.timeout_s), wait_for_workers=False,
            )  # fmt: skip
        except RuntimeError as exc:
            self._lost = f"the rendezvous store is unreachable ({_first_line(exc)})"
            return
        seen = self._seen
        while not self._closed.wait(HEARTBEAT_S):
            try:
                store.add(f"hb/{self.rank}", 1)
                now = time.monotonic()
                for r in range(self.world_size):
                    if r == self.rank:
                        continue
                    count = store.add(f"hb/{r}", 0)
                    last = seen.get(r)
                    if last is None or last[0] != count:
                        seen[r] = (count, now)
                    elif now - last[1] > self.timeout_s:
                        self._lost = f"rank {r} sent no heartbeat for {now - last[1]:.0f} s"
                        return
            except RuntimeError as exc:  # the store (rank 0's) is gone or stuck
                why = _first_line(exc)
                self._lost = f"the rendezvous store on rank 0 stopped answering ({why})"
                return

    def _silent_rank(self) -> str | None:
        """The rank whose heartbeat stopped longest ago, once it missed two beats: a
        collective's timeout names no rank, and it may come before the heartbeat's."""
        now = time.monotonic()
        silent = {r: now - t for r, (_, t) in list(self._seen.items())}
        rank = max(silent, key=silent.__getitem__, default=None)
        if rank is None or silent[rank] <= 2 * HEARTBEAT_S:
            return None
        return f"rank {rank} sent no heartbeat for {silent[rank]:.0f} s"

    def check(self) -> None:
        """Raise GroupLostError once the heartbeat has found a rank lost."""
        if self._lost is not None:
            raise self._lost_error(self._lost)

    def _lost_error(self, why: str) -> GroupLostError:
        return GroupLostError(
            f"learner rank {self.rank}: the group of {self.world_size} lost a rank ({why}); "
            "every rank exits so that the group restarts together from the last checkpoint"
        )

    def _collective(self, op: Callable[[], T]) -> T:
        t0 = time.perf_counter()
        try:
            return op()
        except RuntimeError as exc:  # DistBackendError, gloo's timeouts and resets
            why = self._lost or self._silent_rank() or _first_line(exc)
            raise self._lost_error(why) from None
        finally:
            self.comm_s += time.perf_counter() - t0

    # ------------------------------------------------------------------ collectives

    def share(self, mine: Any) -> list[Any]:
        """Every rank's `mine` (a small picklable value), in rank order."""
        out: list[Any] = [None] * self.world_size
        self._collective(lambda: dist.all_gather_object(out, mine))
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (the state a group starts from)."""
        box = [obj if self.lead else None]
        self._collective(lambda: dist.broadcast_object_list(box, src=0))
        return box[0]

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """`t` summed over the ranks, in place."""
        self._collective(lambda: dist.all_reduce(t))
        return t

    def average_gradient(
        self, grad: torch.Tensor, samples: int, stats: torch.Tensor
    ) -> tuple[float, torch.Tensor]:
        """The minibatch step's gradient averaged over the ranks, weighted by each rank's
        samples (a rank with none contributes nothing), written back into `grad`; with the
        weighted mean of the loss statistics `stats` [k]. One all-reduce of one buffer:
        [grad * n, n, stats * n]. Returns (the group's samples, the mean statistics)."""
        p, k = grad.numel(), stats.numel()
        buf = self._buffer(p + 1 + k, grad.dtype)
        torch.mul(grad, samples, out=buf[:p])
        buf[p] = samples
        torch.mul(stats.to(buf.dtype), samples, out=buf[p + 1 :])
        self._collective(lambda: dist.all_reduce(buf))
        total = float(buf[p])
        if total > 0:
            torch.div(buf[:p], total, out=grad)
        return total, buf[p + 1 :] / max(total, 1.0)

    def _buffer(self, size: int, dtype: torch.dtype) -> torch.Tensor:
        key = (size, dtype)
        if key not in self._buffers:
            self._buffers[key] = torch.empty(size, dtype=dtype, device=self.device)
        return self._buffers[key]

    # ------------------------------------------------------------------ collecting

    def mark_ready(self, version: int) -> None:
        """This rank holds what it trains on for `version` (the straggler rule counts it)."""
        try:
            self.store.add(f"ready/{version}", 1)
        except RuntimeError as exc:  # rank 0, and its store, gone
            raise self._lost_error(self._lost or _first_line(exc)) from None

    def ready_count(self, version: int) -> int:
        """How many ranks hold their batch for `version`."""
        try:
            return int(self.store.add(f"ready/{version}", 0))
        except RuntimeError as exc:
            raise self._lost_error(self._lost or _first_line(exc)) from None

    def close(self) -> None:
        self._closed.set()
        if dist.is_initialized():
            dist.destroy_process_group()


def _rendezvous_failed(spec: GroupSpec) -> None:
    """The group did not form in RENDEZVOUS_S: say so in one line and exit 6 now (the main
    thread is blocked inside torch, where no exception reaches)."""
    line = (
        f"learner rank {spec.rank}: the group of {spec.world_size} did not form at "
        f"{spec.master_addr}:{spec.master_port} within {RENDEZVOUS_S:.0f} s; check that "
        "every rank runs (rank 0 first among them) with the same WORLD_SIZE, MASTER_ADDR "
        "and MASTER_PORT"
    )
    log.error("%s", line)
    print(f"ppomq: error: {line}", file=sys.stderr, flush=True)
    os._exit(GroupLostError.exit_code)


def straggler_quorum(world_size: int, sync_frac: float) -> int:
    """Ranks that must be ready before a straggler cuts its collection short (DD-PPO's
    rule, Habitat's `sync_frac`); more than the others: 1.0 waits for every rank."""
    return min(world_size, max(1, math.ceil(sync_frac * world_size)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
