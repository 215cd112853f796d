"""What the Sample Factory runners (sf_atari.py, sf_mujoco.py) share: per-env score logs
written from SF's spawned workers and merged after the run, SF's runner started with an
observer that marks when training starts and stops, and the result's metadata."""

from __future__ import annotations

import bisect
import csv
import importlib.metadata
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from benchmarks.contenders.mujoco_common import EpisodeLog

HEARTBEAT_STEPS = 1000


class ScoreLog(gym.Wrapper):
    """Appends `unix,agent_steps,score` rows for one env instance to its own CSV file."""

    def __init__(self, env: gym.Env, path: Path) -> None:
        super().__init__(env)
        self.path, self.steps, self.file = path, 0, None

    def _row(self, score: float | None) -> None:
        if self.file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "a", buffering=1)  # noqa: SIM115 (closed in close())
        text = "" if score is None else repr(score)
        self.file.write(f"{time.time():.3f},{self.steps},{text}\n")

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        score = self.score(reward, terminated, truncated, info)
        if score is not None:
            self._row(score)
        elif self.steps == 1 or self.steps % HEARTBEAT_STEPS == 0:
            self._row(None)
        return obs, reward, terminated, truncated, info

    def score(self, reward: float, terminated: bool, truncated: bool, info: dict) -> float | None:
        """The score of an episode that ended at this step, else None: here the `episode`
        info of a RecordEpisodeStatistics wrapper inside (Atari: a whole game's raw score)."""
        episode = info.get("episode")
        return None if episode is None else float(np.asarray(episode["r"]).reshape(-1)[0])

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        super().close()


def read_env_logs(episode_dir: Path) -> list[list[tuple[float, int, float | None]]]:
    logs = []
    for path in sorted(episode_dir.glob("env-*.csv")):
        rows = []
        with open(path) as f:
            for unix, steps, score in csv.reader(f):
                rows.append((float(unix), int(steps), float(score) if score else None))
        if rows:
            logs.append(rows)
    return logs


def steps_at(rows: list[tuple[float, int, float | None]], times: list[float], t: float) -> float:
    """One env's agent steps at time t, linear between its rows (0 before the first)."""
    i = bisect.bisect_right(times, t)
    if i == 0:
        return 0.0
    if i == len(rows):
        return float(rows[-1][1])
    (t0, s0, _), (t1, s1, _) = rows[i - 1], rows[i]
    return s0 + (s1 - s0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)


def merge_episodes(logs: list[list[tuple[float, int, float | None]]]) -> EpisodeLog:
    times = [[r[0] for r in rows] for rows in logs]
    finished = sorted(
        (unix, k, steps, score)
        for k, rows in enumerate(logs)
        for unix, steps, score in rows
        if score is not None
    )
    log = EpisodeLog()
    for unix, k, steps, score in finished:
        others = sum(
            steps_at(rows, ts, unix)
            for j, (rows, ts) in enumerate(zip(logs, times, strict=True))
            if j != k
        )
        log.add(round(steps + others), score, unix)
    return log


def versions(*names: str) -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in names}


def jsonable(cfg: Any) -> dict[str, Any]:
    out = {}
    items = cfg.items() if isinstance(cfg, dict) else vars(cfg).items()  # AttrDict or Namespace
    for key, value in sorted(items):
        try:
            json.dumps(value)
        except TypeError:
            value = repr(value)
        out[key] = value
    return out


def run_sf(cfg: Any, who: str) -> dict[str, Any]:
    """SF's runner as `run_rl` runs it (make_runner, init, run), with an observer: the Unix
    times training started and stopped (after its last iteration, before its final save)
    and SF's env step count. Exits with one line if SF fails."""
    import sys

    from sample_factory.algo.runners.runner import AlgoObserver
    from sample_factory.algo.utils.misc import ExperimentStatus
    from sample_factory.train import make_runner

    marks: dict[str, Any] = {}

    class Marks(AlgoObserver):
        def on_start(self, runner: Any) -> None:
            marks["train_start_unix"] = time.time()

        def on_stop(self, runner: Any) -> None:
            marks["train_end_unix"] = time.time()
            marks["sf_env_steps"] = sum(runner.env_steps.values())

    try:
        cfg, runner = make_runner(cfg)
        runner.register_observer(Marks())
        status = runner.init()
        if status == ExperimentStatus.SUCCESS:
            status = runner.run()
    except Exception as e:
        sys.exit(f"{who}: Sample Factory failed: {type(e).__name__}: {e}")
    if status != ExperimentStatus.SUCCESS or "train_end_unix" not in marks:
        sys.exit(f"{who}: Sample Factory ended with status {status} before finishing training")
    return marks
