"""`ppomq train`'s closing lines say what a run lacks in words, never `None`."""

from __future__ import annotations

from pathlib import Path

from ppomq.launch.progress import summary_text

SUMMARY = {
    "total_env_steps": 100_096, "wall_seconds": 13.6, "sps": 7363.0, "versions": 196,
    "solved_at_env_steps": 21_504, "solve_threshold": 475.0, "final_eval_return": 460.84,
    "batches_accepted": 391, "batches_rejected": {},
}  # fmt: skip


def test_a_solved_run_gives_its_figures():
    text = summary_text(SUMMARY, Path("runs/x"))
    assert "solved at: 21,504 env steps  (threshold 475)" in text
    assert "final eval return: 460.8" in text and "run dir: runs/x" in text


def test_no_threshold_no_solve_and_no_evaluation_are_said_in_words():
    lacking = dict(SUMMARY, solved_at_env_steps=None, solve_threshold=None, final_eval_return=None)
    text = summary_text(lacking, Path("runs/x"))
    assert "None" not in text
    assert "solved at: no threshold" in text and "final eval return: not run" in text
    unsolved = summary_text(dict(SUMMARY, solved_at_env_steps=None), Path("runs/x"))
    assert "solved at: not solved  (threshold 475)" in unsolved
