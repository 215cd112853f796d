"""What a run leaves on disk: episodes, per-update progress, TensorBoard events, summary.

run_dir/settings.json        every setting used
run_dir/episodes.csv         env_steps,wall_s,return,length (one row per finished episode)
run_dir/progress.csv         one row per PPO update (version, SPS, losses, phase times)
run_dir/tb/                  TensorBoard event files
run_dir/checkpoints/ckpt.pt  learner resume state
run_dir/final_weights.pt     torch.load-able state dict + metadata
run_dir/learning_curve.png   return against env steps
run_dir/summary.json         the figures a benchmark or a user wants first
"""

from __future__ import annotations

import csv
import json
import math
from collections import deque
from pathlib import Path
from typing import Any

SOLVE_WINDOW = 20  # "mean of the last 20 episodes", the CartPole-v1 convention


class RunRecorder:
    """Appends episodes and updates to the run dir and tracks when the run solved its env."""

    def __init__(self, run_dir: str | Path, *, solve_threshold: float | None) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.solve_threshold = solve_threshold
        self.window: deque[float] = deque(maxlen=SOLVE_WINDOW)
        self.episodes = 0
        self.solved_at_env_steps: int | None = None
        self.solved_at_wall_s: float | None = None
        self._episodes_fh = open(self.dir / "episodes.csv", "a", newline="")  # noqa: SIM115
        self._episodes_csv = csv.writer(self._episodes_fh)
        if self._episodes_fh.tell() == 0:
            self._episodes_csv.writerow(["env_steps", "wall_s", "return", "length"])
        self._progress_fh = open(self.dir / "progress.csv", "a", newline="")  # noqa: SIM115
        self._progress_csv: csv.DictWriter | None = None
        self._tb: Any = None
        try:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tb"), flush_secs=10)
        except ImportError:  # TensorBoard events are a nicety; the CSVs carry the data
            self._tb = None

    @property
    def mean_return(self) -> float | None:
        return sum(self.window) / len(self.window) if self.window else None

    def add_episodes(
        self, returns: list[float], lengths: list[int], *, env_steps: int, wall_s: float
    ) -> None:
        for ret, length in zip(returns, lengths, strict=True):
            self.episodes += 1
            self.window.append(ret)
            self._episodes_csv.writerow([env_steps, f"{wall_s:.3f}", ret, length])
            if self._tb is not None:
                self._tb.add_scalar("charts/episodic_return", ret, env_steps)
                self._tb.add_scalar("charts/episodic_length", length, env_steps)
            if (
                self.solved_at_env_steps is None
                and self.solve_threshold is not None
                and len(self.window) == SOLVE_WINDOW
                and self.mean_return is not None
                and self.mean_return >= self.solve_threshold
            ):
                self.solved_at_env_steps = env_steps
                self.solved_at_wall_s = wall_s

    def add_update(self, row: dict[str, Any], *, env_steps: int) -> None:
        if self._progress_csv is None:
            self._progress_csv = csv.DictWriter(self._progress_fh, fieldnames=list(row))
            if self._progress_fh.tell() == 0:
                self._progress_csv.writeheader()
        self._progress_csv.writerow({k: row.get(k) for k in self._progress_csv.fieldnames})
        self._progress_fh.flush()
        self._episodes_fh.flush()
        if self._tb is not None:
            for key, value in row.items():
                if "/" in key and isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(key, value, env_steps)

    def get_state(self) -> dict[str, Any]:
        """What a learner checkpoint carries so that a resumed run's summary is right."""
        return {
            "window": list(self.window),
            "episodes": self.episodes,
            "solved_at_env_steps": self.solved_at_env_steps,
            "solved_at_wall_s": self.solved_at_wall_s,
        }

    def set_state(self, state: dict[str, Any], *, env_steps: int) -> None:
        """Resume from a checkpoint taken at `env_steps`: the rows written after it
        describe work the restarted learner does not count, so they are cut off."""
        self.window.clear()
        self.window.extend(state.get("window", []))
        self.episodes = int(state.get("episodes", 0))
        self.solved_at_env_steps = state.get("solved_at_env_steps")
        self.solved_at_wall_s = state.get("solved_at_wall_s")
        for fh in (self._episodes_fh, self._progress_fh):
            _truncate_rows_after(fh, env_steps)

    def write_json(self, name: str, doc: dict[str, Any]) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)  # atomic: a reader never sees half a file
        return path

    def close(self) -> None:
        self._episodes_fh.close()
        self._progress_fh.close()
        if self._tb is not None:
            self._tb.close()


def _truncate_rows_after(fh: Any, env_steps: int) -> None:
    """Keep the header and the rows whose `env_steps` column is at most `env_steps`."""
    fh.flush()
    path = Path(fh.name)
    with open(path, newline="") as src:
        rows = list(csv.reader(src))
    if not rows:
        return
    col = rows[0].index("env_steps")
    kept = [rows[0]] + [r for r in rows[1:] if r and int(float(r[col])) <= env_steps]
    if len(kept) == len(rows):
        return
    fh.seek(0)
    fh.truncate()
    csv.writer(fh).writerows(kept)
    fh.flush()


def read_csv(path: str | Path) -> list[dict[str, float]]:
    """Rows of a run-dir CSV as floats (empty cells as NaN)."""
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            out.append({k: float(v) if v not in ("", None) else math.nan for k, v in row.items()})
    return out


def plot_learning_curve(run_dir: str | Path, *, threshold: float | None = None) -> Path:
    """learning_curve.png: episode returns and their 20-episode mean against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_csv(run_dir / "episodes.csv")
    steps = [r["env_steps"] for r in rows]
    rets = [r["return"] for r in rows]
    window: deque[float] = deque(maxlen=SOLVE_WINDOW)
    means = []
    for r in rets:
        window.append(r)
        means.append(sum(window) / len(window))
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, rets, ".", alpha=0.25, label="episode return")
    ax.plot(steps, means, "-", label=f"mean of last {SOLVE_WINDOW}")
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"target {threshold:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(run_dir.name)
    ax.legend(loc="lower right")
    fig.tight_layout()
    out = run_dir / "learning_curve.png"
    fig.savefig(out)
    plt.close(fig)
    return out
