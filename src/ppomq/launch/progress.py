"""What `ppomq train` shows: one live progress line, then the run's summary."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppomq.core.store.connect import connect_redis

if TYPE_CHECKING:
    from ppomq.launch.supervisor import Launcher


class Progress:
    """One live line: steps, SPS, return, version, rejects (read from Redis status)."""

    def __init__(self, launcher: Launcher) -> None:
        from ppomq.core.store.keys import RunKeys

        self.launcher = launcher
        self.redis = connect_redis(launcher.redis_url)
        self.key = RunKeys(launcher.s.run_id).stats
        self.tty = sys.stdout.isatty()
        self.last = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last < (1.0 if self.tty else 10.0):
            return
        self.last = now
        try:
            raw = self.redis.get(self.key)
        except Exception:
            return
        if not raw:
            return
        st = json.loads(raw)
        ret = st.get("mean_return_20")
        shown = "n/a" if ret is None else f"{ret:.1f}"
        rejects = sum(st.get("rejects", {}).values())
        line = (
            f"steps {st['env_steps']:>8,}  sps {st['sps']:>7,.0f}  "
            f"return {shown:>6}  "
            f"version {st['version']:>5}  rejects {rejects}  "
            f"[{now - self.launcher.start_time:5.1f}s]"
        )
        if self.tty:
            print("\r\033[K" + line, end="", flush=True)
        else:
            print(line, flush=True)


def summary_text(s: dict[str, Any], run_dir: Path) -> str:
    solved = s.get("solved_at_env_steps")
    ev = s.get("final_eval_return")
    return "\n".join(
        [
            f"done: {s['total_env_steps']:,} env steps in {s['wall_seconds']:.1f} s "
            f"({s['sps']:,.0f} SPS), {s['versions']} versions",
            f"  solved at: {f'{solved:,} env steps' if solved is not None else 'not solved'}"
            f"  (threshold {s.get('solve_threshold')})",
            f"  final eval return: {ev if ev is None else round(ev, 1)}  "
            f"batches accepted {s['batches_accepted']}, rejected {s['batches_rejected']}",
            f"  run dir: {run_dir}",
        ]
    )
