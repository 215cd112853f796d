"""What `ppomq train` shows: one live progress line, then the run's summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppomq.core.store.connect import connect_redis
from ppomq.reports.bottleneck import status_bottleneck

if TYPE_CHECKING:
    from rich.live import Live

    from ppomq.launch.supervisor import Launcher


class Progress:
    """One live line: steps, SPS, return, version, rejects (read from Redis status).

    On a terminal, rich's Live redraws it in place every second, with whatever else the
    launcher prints going above it; anywhere else (a pipe, CI, a test) it is a plain line
    every 10 s. `close()` ends the live line."""

    def __init__(self, launcher: Launcher) -> None:
        # rich is imported here, once the services are started: `ppomq train` imports
        # this module before it forks them, and they need none of it.
        from rich.console import Console

        from ppomq.core.store.keys import RunKeys

        self.launcher = launcher
        self.redis = connect_redis(launcher.redis_url)
        self.key = RunKeys(launcher.s.run_id).stats
        self.console = Console(highlight=False)
        self.live: Live | None = None
        self.last = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        interactive = self.console.is_interactive
        if now - self.last < (1.0 if interactive else 10.0):
            return
        self.last = now
        try:
            raw = self.redis.get(self.key)
        except Exception:
            return
        line = current_line(self.launcher.evaluation, raw, now - self.launcher.start_time)
        if line is None:
            return
        if not interactive:
            print(line, flush=True)
            return
        from rich.live import Live
        from rich.text import Text

        if self.live is None:
            self.live = Live(console=self.console, auto_refresh=False)
            self.live.start()
        self.live.update(Text(line, no_wrap=True, overflow="ellipsis"), refresh=True)

    def close(self) -> None:
        """End the live line (the cursor goes below it); nothing to do for plain lines."""
        if self.live is not None:
            self.live.stop()
            self.live = None


def current_line(evaluation: Any, raw_status: bytes | None, elapsed_s: float) -> str | None:
    """The line to show now: the final evaluation's while it runs (the learner trains no
    more, and its status would repeat the last update's figures), else training's from the
    learner's status; None before the learner has reported."""
    if evaluation is not None and evaluation.running:
        return evaluation.line()
    if not raw_status:
        return None
    return progress_line(json.loads(raw_status), elapsed_s)


def progress_line(st: dict[str, Any], elapsed_s: float) -> str:
    """The line for the learner's status `st`, `elapsed_s` into the run; it ends with the
    side that binds when the run knows it (`ppomq status` says what to change)."""
    ret = st.get("mean_return_20")
    shown = "n/a" if ret is None else f"{ret:.1f}"
    rejects = sum(st.get("rejects", {}).values())
    bound = status_bottleneck(st).short
    return (
        f"steps {st['env_steps']:>8,}  sps {st['sps']:>7,.0f}  "
        f"return {shown:>6}  "
        f"version {st['version']:>5}  rejects {rejects}  "
        f"[{elapsed_s:5.1f}s]" + (f"  {bound}" if bound else "")
    )


def summary_text(s: dict[str, Any], run_dir: Path, *, stopped: bool = False) -> str:
    """The closing lines of `ppomq train`; a figure the run does not have is said in words,
    never printed as None. `stopped`: a stop signal ended the run before its end."""
    from ppomq.core.evaluation_text import evaluation_words

    solved, threshold = s.get("solved_at_env_steps"), s.get("solve_threshold")
    if threshold is None:
        solved_text = "no threshold (the env has none; --target-return sets one)"
    elif solved is None:
        solved_text = f"not solved  (threshold {threshold:g})"
    else:
        solved_text = f"{solved:,} env steps  (threshold {threshold:g})"
    ev = s.get("final_eval")
    if ev is not None:
        ev_text = evaluation_words(ev, "--eval-timeout-s")
    elif s.get("final_eval_return") is not None:  # a summary written before final_eval
        ev_text = f"{s['final_eval_return']:.1f}"
    else:
        ev_text = "not run"
    head = "stopped before the run's end" if stopped else "done"
    return "\n".join(
        [
            f"{head}: {s['total_env_steps']:,} env steps in {s['wall_seconds']:.1f} s of "
            f"training ({s['sps']:,.0f} SPS), {s['versions']} versions",
            f"  solved at: {solved_text}",
            f"  final eval return: {ev_text}",
            f"  batches accepted {s['batches_accepted']}, rejected {s['batches_rejected']}",
            f"  run dir: {run_dir}",
        ]
    )
