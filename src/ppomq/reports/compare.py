"""Two run dirs side by side: the figures a user compares first, a report and a picture.

    from ppomq.reports.compare import load_run, compare_runs
    a, b = load_run("runs/sync"), load_run("runs/async")
    result = compare_runs(a, b, out_dir=Path("runs/compare-sync-vs-async"))
    print(result.table)

A run dir is what `ppomq train` / `ppomq learner` leave (see ppomq.core.rundir): summary.json
once the run has finished, progress.csv and episodes.csv while it runs. A run that was
killed before writing its summary is still compared, from its CSVs, and says so.
"""

from __future__ import annotations

import csv
import json
import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppomq.core.errors import NotFoundError, UsageError
from ppomq.core.rundir import SOLVE_WINDOW
from ppomq.reports import tables

PHASES = ("wait", "targets", "sgd", "publish")
PHASE_COLORS = {"wait": "#bbbbbb", "targets": "#6baed6", "sgd": "#2171b5", "publish": "#fd8d3c"}


@dataclass
class RunData:
    """What one run dir holds, read once."""

    path: Path
    label: str
    summary: dict[str, Any]
    settings: dict[str, Any]
    episodes: list[tuple[float, float, float]]  # (env_steps, wall_s, return)
    progress: list[dict[str, float]]
    finished: bool
    notes: list[str] = field(default_factory=list)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path} is not readable JSON ({exc}); is it a ppomq run dir?") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path} does not hold a JSON object; is it a ppomq run dir?")
    return doc


def _read_rows(path: Path, required: tuple[str, ...]) -> list[dict[str, float]]:
    """A run-dir CSV as float rows; cells that are empty or not numbers become NaN."""
    if not path.exists():
        return []
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise UsageError(f"{path} lacks column(s) {missing}; is it a ppomq run dir?")
            rows = []
            for row in reader:
                rows.append({k: _num(v) for k, v in row.items() if k is not None})
            return rows
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path} is not a readable CSV ({exc})") from None


def _num(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def load_run(path: str | Path, label: str | None = None) -> RunData:
    """Read a run dir. NotFoundError (exit 3) when it is not there, UsageError (exit 2)
    when it is there but is not a ppomq run dir."""
    p = Path(path)
    if not p.exists():
        raise NotFoundError(f"run dir {p} not found; check the path")
    if not p.is_dir():
        raise UsageError(f"{p} is not a directory; pass a run dir from `ppomq train`")
    has_summary = (p / "summary.json").exists()
    if not has_summary and not (p / "progress.csv").exists():
        raise UsageError(
            f"{p} is not a ppomq run dir (no summary.json or progress.csv); "
            "pass the --run-dir of a `ppomq train` run"
        )
    summary = _read_json(p / "summary.json") if has_summary else {}
    settings: dict[str, Any] = {}
    for name in ("settings.json", "learner_settings.json"):
        if (p / name).exists():
            settings = _read_json(p / name)
            break
    ep_rows = _read_rows(p / "episodes.csv", ("env_steps", "wall_s", "return"))
    episodes = [(r["env_steps"], r["wall_s"], r["return"]) for r in ep_rows]
    progress = _read_rows(p / "progress.csv", ("version", "env_steps", "wall_s"))
    run = RunData(
        path=p,
        label=label or p.name,
        summary=summary,
        settings=settings,
        episodes=episodes,
        progress=progress,
        finished=has_summary,
    )
    if not has_summary:
        run.notes.append(f"{run.label}: no summary.json (running or killed); figures from CSVs")
    return run


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------


def _rolling_mean(values: list[float], window: int = SOLVE_WINDOW) -> list[float]:
    q: deque[float] = deque(maxlen=window)
    out = []
    for v in values:
        q.append(v)
        out.append(sum(q) / len(q))
    return out


def _solved_from_episodes(run: RunData, threshold: float | None) -> tuple[Any, Any]:
    """(env steps, wall s) when the mean of the last 20 episodes first reached threshold."""
    if threshold is None:
        return None, None
    q: deque[float] = deque(maxlen=SOLVE_WINDOW)
    for steps, wall, ret in run.episodes:
        q.append(ret)
        if len(q) == SOLVE_WINDOW and sum(q) / SOLVE_WINDOW >= threshold:
            return int(steps), wall
    return None, None


def learner_phases(run: RunData) -> dict[str, float]:
    """Seconds per learner phase: summary.json's totals, else the sum over progress.csv."""
    got = run.summary.get("learner_time_s")
    if isinstance(got, dict) and got:
        return {p: float(got.get(p, 0.0) or 0.0) for p in PHASES}
    out = {}
    for p in PHASES:
        vals = [r.get(f"time/learner_{p}", math.nan) for r in run.progress]
        out[p] = sum(v for v in vals if not math.isnan(v))
    return out


def metrics(run: RunData) -> dict[str, Any]:
    """The comparable figures of one run, from summary.json where there is one."""
    s = run.summary
    last = run.progress[-1] if run.progress else {}
    env_steps = s.get("total_env_steps")
    if env_steps is None:
        env_steps = int(last["env_steps"]) if last else 0
    wall = s.get("wall_seconds")
    if wall is None:
        wall = last.get("wall_s", 0.0) if last else 0.0
    threshold = s.get("solve_threshold", run.settings.get("target_return"))
    solved_steps, solved_wall = s.get("solved_at_env_steps"), s.get("solved_at_wall_s")
    if not run.finished:
        solved_steps, solved_wall = _solved_from_episodes(run, threshold)
    rejected = s.get("batches_rejected")
    rejected_n = sum(rejected.values()) if isinstance(rejected, dict) else rejected
    phases = learner_phases(run)
    busy = sum(phases.values())
    returns = [e[2] for e in run.episodes]
    final_mean = s.get("final_mean_return_20")
    if final_mean is None and returns:
        final_mean = sum(returns[-SOLVE_WINDOW:]) / len(returns[-SOLVE_WINDOW:])
    return {
        "run_dir": str(run.path),
        "label": run.label,
        "finished": run.finished,
        "env_id": s.get("env_id", run.settings.get("env_id")),
        "mode": s.get("mode", run.settings.get("mode")),
        "actors": s.get("actors", run.settings.get("actors")),
        "env_steps": env_steps,
        "wall_s": wall,
        "sps": s.get("sps", env_steps / wall if wall else None),
        "solve_threshold": threshold,
        "solved_at_env_steps": solved_steps,
        "solved_at_wall_s": solved_wall,
        "final_eval_return": s.get("final_eval_return"),
        "final_mean_return_20": final_mean,
        "episodes": s.get("episodes", len(run.episodes)),
        "versions": s.get("versions", int(last["version"]) if last else 0),
        "batches_accepted": s.get("batches_accepted"),
        "batches_rejected": rejected_n,
        "waste_ratio": s.get("waste_ratio"),
        "learner_time_s": phases,
        "learner_time_share": {p: (v / busy if busy else None) for p, v in phases.items()},
    }


# --------------------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------------------


def _fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "s":
        return f"{float(value):,.1f}"
    if kind == "f0":
        return f"{float(value):,.0f}"
    if kind == "f1":
        return f"{float(value):,.1f}"
    if kind == "pct":
        return f"{float(value):.1%}"
    return str(value)


# (label, key, format, whether a B/A ratio means something)
_ROWS: tuple[tuple[str, str, str, bool], ...] = (
    ("env", "env_id", "str", False),
    ("mode", "mode", "str", False),
    ("actors", "actors", "int", False),
    ("env steps", "env_steps", "int", True),
    ("wall time (s)", "wall_s", "s", True),
    ("SPS", "sps", "f0", True),
    ("solved at (env steps)", "solved_at_env_steps", "int", True),
    ("solved at (wall s)", "solved_at_wall_s", "s", True),
    ("final eval return", "final_eval_return", "f1", True),
    ("mean return, last 20", "final_mean_return_20", "f1", True),
    ("versions", "versions", "int", True),
    ("batches accepted", "batches_accepted", "int", True),
    ("batches rejected", "batches_rejected", "int", False),
    ("waste ratio", "waste_ratio", "pct", False),
)


def table_rows(ma: dict[str, Any], mb: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, A, B, B/A) text rows, learner phases last."""
    rows = []
    for label, key, kind, ratio in _ROWS:
        a, b = ma.get(key), mb.get(key)
        if label == "solved at (env steps)" and ma.get("solve_threshold") is not None:
            label = f"solved at (env steps, >= {ma['solve_threshold']:g})"
        r = "-"
        if ratio and isinstance(a, int | float) and isinstance(b, int | float) and a:
            r = f"{b / a:.2f}x"
        rows.append((label, _fmt(a, kind), _fmt(b, kind), r))
    for p in PHASES:
        a, b = ma["learner_time_s"][p], mb["learner_time_s"][p]
        sa, sb = ma["learner_time_share"][p], mb["learner_time_share"][p]
        rows.append(
            (
                f"learner {p} (s, share)",
                f"{a:,.1f} ({_fmt(sa, 'pct')})",
                f"{b:,.1f} ({_fmt(sb, 'pct')})",
                f"{b / a:.2f}x" if a else "-",
            )
        )
    return rows


def legend(ma: dict[str, Any], mb: dict[str, Any]) -> list[str]:
    """One line per run naming what its column holds: `A: RUN_DIR`, or `A: LABEL  (RUN_DIR)`
    where the label is not the run dir's own name."""
    lines = []
    for col, m in (("A", ma), ("B", mb)):
        path, label = m["run_dir"], m["label"]
        named = label in (path, Path(path).name)
        lines.append(f"{col}: {path}" if named else f"{col}: {label}  ({path})")
    if Path(ma["run_dir"]).resolve() == Path(mb["run_dir"]).resolve():
        lines.append("(A and B are the same run dir)")
    return lines


def format_table(ma: dict[str, Any], mb: dict[str, Any]) -> str:
    """The legend, then the table. The runs are named in the legend, not in the column
    headers: a header as long as a run dir's name widened both value columns to it, and the
    rows wrapped in a terminal of 80 columns; with one-letter headers the table is as wide
    as its figures."""
    rows = tables.format_table(
        ("", "A", "B", "B/A"), table_rows(ma, mb), right={1, 2, 3}, rule=True
    )
    return "\n".join([*legend(ma, mb), "", rows])


# --------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------


def sps_over_time(run: RunData, points: int = 60) -> tuple[list[float], list[float]]:
    """(wall s, env steps/s) from progress.csv, each rate over a sliding window of about
    1/`points` of the run (at least 1 s), so that per-update jitter does not hide trends."""
    rows = [r for r in run.progress if not math.isnan(r["wall_s"])]
    if len(rows) < 2:
        return [], []
    span = max(rows[-1]["wall_s"] / points, 1.0)
    xs, ys = [], []
    j = 0
    for i in range(1, len(rows)):
        while j < i - 1 and rows[i]["wall_s"] - rows[j + 1]["wall_s"] >= span:
            j += 1
        dt = rows[i]["wall_s"] - rows[j]["wall_s"]
        if dt > 0:
            xs.append(rows[i]["wall_s"])
            ys.append((rows[i]["env_steps"] - rows[j]["env_steps"]) / dt)
    return xs, ys


def plot_comparison(a: RunData, b: RunData, ma: dict, mb: dict, path: Path) -> Path:
    """compare.png: return vs env steps, return vs wall time, SPS over time, learner time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100)
    (ax_steps, ax_wall), (ax_sps, ax_phase) = axes
    colors = ("#1f77b4", "#d62728")
    threshold = ma.get("solve_threshold") or mb.get("solve_threshold")
    for run, color in zip((a, b), colors, strict=True):
        steps = [e[0] for e in run.episodes]
        walls = [e[1] for e in run.episodes]
        rets = [e[2] for e in run.episodes]
        mean = _rolling_mean(rets)
        for ax, xs in ((ax_steps, steps), (ax_wall, walls)):
            ax.plot(xs, rets, ".", color=color, alpha=0.12, ms=3)
            ax.plot(xs, mean, "-", color=color, lw=1.8, label=f"{run.label} (mean of 20)")
        xs, ys = sps_over_time(run)
        ax_sps.plot(xs, ys, "-", color=color, lw=1.5, label=run.label)
    for ax, xlabel in ((ax_steps, "env steps"), (ax_wall, "wall time (s)")):
        if threshold is not None:
            ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"target {threshold:g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("episode return")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
    ax_steps.set_title("Return against env steps")
    ax_wall.set_title("Return against wall time (learner clock)")
    ax_sps.set_title("SPS over time (env steps reaching the learner)")
    ax_sps.set_xlabel("wall time (s)")
    ax_sps.set_ylabel("env steps / s")
    ax_sps.set_ylim(bottom=0)
    ax_sps.legend(loc="lower right", fontsize=8)
    ax_sps.grid(alpha=0.3)

    labels = [ma["label"], mb["label"]]
    bottoms = [0.0, 0.0]
    for p in PHASES:
        vals = [ma["learner_time_s"][p], mb["learner_time_s"][p]]
        ax_phase.bar(labels, vals, bottom=bottoms, color=PHASE_COLORS[p], label=p, width=0.5)
        for i, (v, m) in enumerate(zip(vals, (ma, mb), strict=True)):
            share = m["learner_time_share"][p]
            if share and share >= 0.06:  # label only segments tall enough to hold text
                ax_phase.text(i, bottoms[i] + v / 2, f"{p} {share:.0%}", ha="center",
                              va="center", fontsize=8)  # fmt: skip
        bottoms = [bt + v for bt, v in zip(bottoms, vals, strict=True)]
    ax_phase.set_title("Learner time by phase")
    ax_phase.set_ylabel("seconds")
    ax_phase.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"ppomq bench compare: A = {ma['label']}  vs  B = {mb['label']}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------
# The whole comparison
# --------------------------------------------------------------------------------------


@dataclass
class Comparison:
    a: dict[str, Any]
    b: dict[str, Any]
    table: str
    report_path: Path
    plot_path: Path
    notes: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "report": str(self.report_path),
            "plot": str(self.plot_path),
            "notes": self.notes,
        }


def compare_runs(a: RunData, b: RunData, *, out_dir: Path) -> Comparison:
    """Table, report.txt and compare.png in `out_dir` (created)."""
    if a.label == b.label:  # two runs named alike in different parents: their paths as given
        a.label, b.label = str(a.path), str(b.path)
    ma, mb = metrics(a), metrics(b)
    notes = [*a.notes, *b.notes]
    if ma["env_id"] != mb["env_id"]:
        notes.append(f"different envs: {ma['env_id']} vs {mb['env_id']}")
    table = format_table(ma, mb)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out_dir} ({exc.strerror}); pass another -o") from None
    plot_path = plot_comparison(a, b, ma, mb, out_dir / "compare.png")
    report_path = out_dir / "report.txt"
    report = [
        "ppomq bench compare",
        "",
        table,
        "",
        "Learner phases: wait = waiting for batches, targets = flattening the batches and "
        "their GAE advantages and returns, sgd = the PPO epochs, publish = packing and "
        "storing the new weights. waste ratio = rejected / produced batches. Wall time and "
        "SPS are the learner's clock (from its start).",
        *(f"note: {n}" for n in notes),
        f"plot: {plot_path}",
    ]
    report_path.write_text("\n".join(report) + "\n")
    return Comparison(ma, mb, table, report_path, plot_path, notes)
