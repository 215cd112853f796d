"""What a run leaves on disk: episodes, per-update progress, TensorBoard events, summary.

run_dir/settings.json        every setting used
run_dir/episodes.csv         env_steps,wall_s,return,length (one row per finished episode)
run_dir/progress.csv         one row per PPO update (version, SPS, losses, phase times)
run_dir/tb/                  TensorBoard event files
run_dir/checkpoints/ckpt.pt  learner resume state
run_dir/final_weights.pt     torch.load-able state dict + metadata
run_dir/learning_curve.png   return against env steps
run_dir/summary.json         the figures a benchmark or a user wants first
run_dir/logs/                each service's log; with `ppomq train`, launcher.log: the
                             run's phases with timestamps (ppomq.core.timeline), and redis.log
run_dir/redis/               `ppomq train`'s embedded Redis, persisted (append-only file,
                             compacted to what is live when the run ends): the run's kept
                             weight versions and status, which `ppomq weights` and
                             `ppomq status` read after the run (ppomq.core.store.run_redis)
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("ppomq")

SOLVE_WINDOW = 20  # "mean of the last 20 episodes", the CartPole-v1 convention
# Written by the learner when its run ends normally (the same JSON as Redis `finished`).
FINISHED_FILE = "finished.json"
# The learner's resume state (ppomq.learner.checkpoint writes and verifies it).
CHECKPOINT_FILE = "checkpoints/ckpt.pt"
# Where the embedded Redis of `ppomq train` keeps its data, under the run dir; settings.json
# records it as `redis_data_dir` (null for a run on an external Redis, absent in run dirs
# from before it was kept: their versions went with their Redis).
REDIS_DIR = "redis"
# Where `ppomq train` makes a run dir when given none (relative to where it runs), and so
# where `ppomq status` and `ppomq weights` look for the newest run when told no run.
RUNS_ROOT = Path("runs")


def write_bytes_atomic(
    path: Path,
    data: bytes,
    *,
    keep_previous: Path | None = None,
    verify: Callable[[Path], object] | None = None,
) -> Path:
    """Write `data` to a temp file beside `path`, flush it to the disk, then rename it over
    `path`: a reader never sees half a file, and a crash (or a full disk) at any point leaves
    the old file whole. `verify(temp_path)` may refuse what reached the disk (by raising)
    before it replaces anything. With `keep_previous`, the file being replaced is kept under
    that name (a hard link, swapped in atomically), so `path` itself never goes missing."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if verify is not None:
            verify(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial temp file holds the space a full disk lacks
        raise
    if keep_previous is not None and path.exists():
        link = keep_previous.with_name(keep_previous.name + ".tmp")
        link.unlink(missing_ok=True)
        os.link(path, link)
        os.replace(link, keep_previous)
    os.replace(tmp, path)
    _fsync_dir(path.parent)  # the rename itself survives a power cut
    return path


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, doc: Any, *, sort_keys: bool = False) -> Path:
    """`doc` as JSON through write_bytes_atomic: a reader (`ppomq status`, a benchmark,
    TensorBoard's host) never sees half a file."""
    text = json.dumps(doc, indent=2, sort_keys=sort_keys) + "\n"
    return write_bytes_atomic(path, text.encode())


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
            if (
                self.solved_at_env_steps is None
                and self.solve_threshold is not None
                and len(self.window) == SOLVE_WINDOW
                and self.mean_return is not None
                and self.mean_return >= self.solve_threshold
            ):
                self.solved_at_env_steps = env_steps
                self.solved_at_wall_s = wall_s
        if returns and self._tb_writing():
            # Every episode's two scalars in one event (a summary holds many values; the
            # same tags and step as one event each): a batch of short episodes holds
            # thousands, and tensorboardX's queue costs about 0.15 ms an event.
            from tensorboardX.proto.summary_pb2 import Summary

            values = [Summary.Value(tag="charts/episodic_return", simple_value=float(r))
                      for r in returns]  # fmt: skip
            values += [Summary.Value(tag="charts/episodic_length", simple_value=float(n))
                       for n in lengths]  # fmt: skip
            self._tb._get_file_writer().add_summary(Summary(value=values), env_steps)

    def add_update(self, row: dict[str, Any], *, env_steps: int) -> None:
        if self._progress_csv is None:
            self._progress_csv = csv.DictWriter(self._progress_fh, fieldnames=list(row))
            if self._progress_fh.tell() == 0:
                self._progress_csv.writeheader()
        self._progress_csv.writerow({k: row.get(k) for k in self._progress_csv.fieldnames})
        self._progress_fh.flush()
        self._episodes_fh.flush()
        for key, value in row.items():
            if "/" in key and isinstance(value, int | float) and math.isfinite(value):
                self._scalar(key, value, env_steps)

    def _scalar(self, key: str, value: float, step: int) -> None:
        """One TensorBoard scalar, if its writer still writes (checked before each: one
        update's scalars outnumber the writer's queue)."""
        if self._tb_writing():
            self._tb.add_scalar(key, value, step)

    def _tb_writing(self) -> bool:
        """Whether TensorBoard events still go out. tensorboardX writes them from a thread
        through a bounded queue; a full disk kills that thread, and the next writes would
        then block the learner forever on the full queue. So once it is dead the events
        stop (said once); the CSVs carry the data, and their own writes name the fault."""
        if self._tb is None:
            return False
        writers = (getattr(self._tb, "all_writers", None) or {}).values()
        if all(w.event_writer._worker.is_alive() for w in writers):
            return True
        log.error("TensorBoard events stopped: their writer failed (its error is above); "
                  "episodes.csv and progress.csv go on")  # fmt: skip
        self._tb = None  # not closed: closing puts on the same full queue
        return False

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
        return write_json_atomic(self.dir / name, doc, sort_keys=True)

    def close(self) -> None:
        """Close every file and the TensorBoard writer, each whatever the others do (a
        full disk fails a close's flush: the writer's thread must still stop, or the
        process would never exit); then raise the first error, if any."""
        errors: list[OSError] = []
        closers = [self._episodes_fh.close, self._progress_fh.close]
        if self._tb_writing():
            closers.append(self._tb.close)
        for close in closers:
            try:
                close()
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


class RecordsDamaged(ValueError):
    """A run-dir CSV that does not parse; the message names the file and the line."""


def _read_rows(path: Path) -> list[list[str]]:
    """The CSV's rows, header first, each data row checked to have the header's width and
    a number in its `env_steps` column (RecordsDamaged otherwise). A last line that a crash
    or a full disk cut short (no newline, does not parse) is left out: it was never a row."""
    try:
        text = path.read_text()
        rows = list(csv.reader(text.splitlines()))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise RecordsDamaged(f"{path} does not parse as CSV ({exc})") from None
    if not rows:
        return rows
    if "env_steps" not in rows[0]:
        raise RecordsDamaged(f"{path} line 1 is not its header (no env_steps column)")
    col = rows[0].index("env_steps")
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            ok = len(row) == len(rows[0]) and math.isfinite(float(row[col]))
        except ValueError:
            ok = False
        if not ok:
            if line == len(rows) and not text.endswith("\n"):
                return rows[:-1]  # torn: _truncate_rows_after rewrites the file without it
            raise RecordsDamaged(f"{path} line {line} is damaged ({','.join(row)[:60]!r})")
    return rows


def _truncate_rows_after(fh: Any, env_steps: int) -> None:
    """Keep the header and the rows whose `env_steps` column is at most `env_steps`, and
    nothing else (a torn last line included)."""
    fh.flush()
    path = Path(fh.name)
    rows = _read_rows(path)
    if not rows:
        return
    col = rows[0].index("env_steps")
    kept = [rows[0]] + [r for r in rows[1:] if r and int(float(r[col])) <= env_steps]
    if len(kept) == len(rows) and path.read_text().endswith("\n"):
        return
    fh.seek(0)
    fh.truncate()
    csv.writer(fh).writerows(kept)
    fh.flush()


def records_up_to(
    run_dir: str | Path, env_steps: int, *, solve_threshold: float | None
) -> dict[str, Any]:
    """What the run dir's records say of the run at `env_steps`: the recorder's state
    (RunRecorder.get_state) and the counters the progress rows carry, for a learner that
    lost its checkpoint. Rows after `env_steps` are not read (a resume cuts them off)."""
    run_dir = Path(run_dir)
    out: dict[str, Any] = {"rows": 0}
    window: deque[float] = deque(maxlen=SOLVE_WINDOW)
    episodes = 0
    solved: tuple[int, float] | None = None
    path = run_dir / "episodes.csv"
    rows = _read_rows(path) if path.exists() else []
    for row in rows[1:]:
        record = dict(zip(rows[0], row, strict=True)) if row else None
        if record is None or float(record["env_steps"]) > env_steps:
            continue
        episodes += 1
        window.append(float(record["return"]))
        if (
            solved is None
            and solve_threshold is not None
            and len(window) == SOLVE_WINDOW
            and sum(window) / SOLVE_WINDOW >= solve_threshold
        ):
            solved = (int(float(record["env_steps"])), float(record["wall_s"]))
    out["recorder"] = {
        "window": list(window),
        "episodes": episodes,
        "solved_at_env_steps": solved[0] if solved else None,
        "solved_at_wall_s": solved[1] if solved else None,
    }
    path = run_dir / "progress.csv"
    rows = _read_rows(path) if path.exists() else []
    updates = [
        {k: float(v) if v not in ("", None) else math.nan for k, v in zip(rows[0], r, strict=True)}
        for r in rows[1:]
        if r and float(r[rows[0].index("env_steps")]) <= env_steps
    ]
    out["rows"] = len(updates) + episodes

    def total(key: str) -> float:
        return float(sum(u.get(key, 0.0) for u in updates if math.isfinite(u.get(key, math.nan))))

    last = updates[-1] if updates else {}
    out["counters"] = {
        "trained_samples": int(total("charts/samples")),
        "wall_s": float(last.get("wall_s", 0.0)),
        "accepted": int(last.get("charts/batches_accepted", 0) or 0),
        "discarded_env_steps": int(last.get("charts/discarded_env_steps", 0) or 0),
        "phase_totals": {
            name: total(f"time/learner_{name}") for name in ("wait", "targets", "sgd", "publish")
        },
    }
    return out


def has_records(run_dir: str | Path) -> bool:
    """Whether the run dir holds episode or update rows (an earlier learner wrote them)."""
    for name in ("episodes.csv", "progress.csv"):
        path = Path(run_dir) / name
        if path.exists():
            with open(path, newline="") as fh:
                if sum(1 for line in fh if line.strip()) > 1:
                    return True
    return False


def read_csv(path: str | Path) -> list[dict[str, float]]:
    """Rows of a run-dir CSV as floats (empty cells as NaN)."""
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            out.append({k: float(v) if v not in ("", None) else math.nan for k, v in row.items()})
    return out


def plot_learning_curve(run_dir: str | Path, *, threshold: float | None = None) -> Path:
    """learning_curve.png (700 x 400): episode returns and their 20-episode mean against
    env steps. matplotlib is imported here, at the end of a run, not when ppomq starts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_csv(run_dir / "episodes.csv")
    points = [(r["env_steps"], r["return"]) for r in rows if math.isfinite(r["return"])]
    window: deque[float] = deque(maxlen=SOLVE_WINDOW)
    means = []
    for _, y in points:
        window.append(y)
        means.append(sum(window) / len(window))
    steps = [x for x, _ in points]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        ax.plot(steps, [y for _, y in points], ".", color=CURVE_POINTS, ms=3,
                label="episode return")  # fmt: skip
        ax.plot(steps, means, "-", color=CURVE_MEAN, lw=2, label=f"mean of last {SOLVE_WINDOW}")
        if threshold is not None:
            ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"target {threshold:g}")
        ax.set_xlim(left=0)
        ax.set_xlabel("env steps")
        ax.set_ylabel("return")
        ax.set_title(run_dir.name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        out = run_dir / "learning_curve.png"
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out


CURVE_POINTS = "#a0bee1"  # light blue: many points, the mean line on top stays readable
CURVE_MEAN = "#ff7f0e"
