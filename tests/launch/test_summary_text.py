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


def test_the_evaluation_is_said_apart_with_what_its_time_bound_left():
    bounded = dict(SUMMARY, final_eval={
        "mean_return": -20.5, "episodes": 2, "episodes_asked": 10, "steps": 7_000,
        "seconds": 60.0, "cut_short": True,
    })  # fmt: skip
    text = summary_text(bounded, Path("runs/x"))
    assert "final eval return: -20.5 over 2 of 10 greedy episodes" in text
    assert "--eval-timeout-s" in text
    none_done = dict(bounded, final_eval=dict(bounded["final_eval"], mean_return=None,
                                              episodes=0))  # fmt: skip
    text = summary_text(none_done, Path("runs/x"))
    assert "None" not in text and "no greedy episode finished within 60 s" in text
    # The figures before it are training's: its seconds and SPS, not the evaluation's.
    assert "in 13.6 s of training (7,363 SPS)" in text


def test_a_run_stopped_before_its_end_says_so():
    assert summary_text(SUMMARY, Path("runs/x"), stopped=True).startswith(
        "stopped before the run's end: 100,096 env steps"
    )
    assert summary_text(SUMMARY, Path("runs/x")).startswith("done: ")
