"""What the MuJoCo peer runners share: their episode log and the result file they leave.

Standard library only (benchmarks.harness is too): the CleanRL runner imports this from its
own venv, which has neither ppomq nor Stable-Baselines3 (see cleanrl_setup.sh).

Every runner writes RUN_DIR/result.json (`write_result`), which benchmarks/learning.py reads:

    contender, env_id, versions{}, hyperparameters{}, torch_threads,
    script_start_unix       the runner's first line (after the interpreter started)
    train_end_unix          the last training env step and update are done
    end_unix                after the greedy evaluation
    env_steps               env steps trained on
    episodes                [[env_steps, unix, return], ...], every training episode
    mean_return_20          mean of the last 20 training episodes
    eval_returns            the greedy episodes' returns; eval_return their mean
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"
MEAN_WINDOW = 20  # "final return" = the mean of the last 20 training episodes
EVAL_EPISODES = 10
# ppomq's finish_run evaluates on seeds seed + 10_000 + i; the peers use the same ones.
EVAL_SEED_OFFSET = 10_000
CLIP_OBS = 10.0  # CleanRL and VecNormalize both clip normalized observations to +-10


class EpisodeLog:
    """Training episodes in the order they finished: (env steps so far, unix time, return)."""

    def __init__(self) -> None:
        self.rows: list[list[float]] = []

    def add(self, env_steps: int, ret: float, unix: float | None = None) -> None:
        self.rows.append(
            [int(env_steps), round(time.time() if unix is None else unix, 3), float(ret)]
        )

    def mean_last(self, n: int = MEAN_WINDOW) -> float | None:
        tail = [r[2] for r in self.rows[-n:]]
        return sum(tail) / len(tail) if tail else None


def write_result(run_dir: str | Path, doc: dict[str, Any]) -> Path:
    """RUN_DIR/result.json, written whole (a reader never sees half a file)."""
    path = Path(run_dir) / RESULT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)
    return path
