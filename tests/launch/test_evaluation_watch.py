"""How the launcher tells the learner's long final evaluation from a learner that hangs:
the learner's `learner.evaluate` events, read from a real event file, on a clock the test
moves."""

from __future__ import annotations

from ppomq.core.events import EventWriter
from ppomq.launch.evaluation import EVAL_SILENT_S, EvaluationWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_evaluation_runs_while_it_says_so_and_hangs_once_silent(tmp_path):
    path = tmp_path / "events.jsonl"
    learner = EventWriter(path, "learner")
    # An earlier run's:
    learner.emit("learner.evaluate", episodes=3, done=0, steps=0, elapsed_s=0.0, limit_s=0.0)
    clock = Clock()
    watch = EvaluationWatch(path, clock)
    assert not watch.poll() and not watch.running  # not this run's
    learner.emit("learner.evaluate", episodes=10, done=0, steps=0, elapsed_s=0.0, limit_s=0.0)
    assert watch.poll() and watch.running and watch.episodes == 10
    for done in (3, 6):  # long, but it keeps saying it goes on
        clock.now += EVAL_SILENT_S - 1
        learner.emit("learner.evaluate", episodes=10, done=done, steps=200 * done,
                     elapsed_s=1.0 * done, limit_s=0.0)  # fmt: skip
        assert not watch.poll()  # no new start
        assert watch.running and not watch.stalled() and watch.done == done
    clock.now += EVAL_SILENT_S + 1  # then nothing: it hangs
    assert not watch.poll() and watch.stalled()


def test_an_evaluation_ends_with_the_learners_stop_event(tmp_path):
    path = tmp_path / "events.jsonl"
    learner = EventWriter(path, "learner")
    clock = Clock()
    watch = EvaluationWatch(path, clock)
    learner.emit("learner.evaluate", episodes=2, done=0, steps=0, elapsed_s=0.0, limit_s=0.0)
    learner.emit("learner.stop", version=3, env_steps=512, finished=True, last_update_t=1.0)
    watch.poll()
    clock.now += 10 * EVAL_SILENT_S
    assert not watch.running and not watch.stalled()


def test_a_line_still_being_written_is_read_once_whole(tmp_path):
    path = tmp_path / "events.jsonl"
    watch = EvaluationWatch(path, Clock())
    line = (
        b'{"t":1.0,"event":"learner.evaluate","source":"learner","episodes":4,"done":0,"steps":0}\n'
    )
    with open(path, "ab") as fh:
        fh.write(line[:30])
        fh.flush()
        assert not watch.poll()
        fh.write(line[30:])
    assert watch.poll() and watch.episodes == 4


def test_without_an_event_file_nothing_is_evaluating():
    watch = EvaluationWatch(None, Clock())
    assert not watch.poll() and not watch.running and not watch.stalled()


def test_the_progress_line_of_an_evaluation_shows_its_own_figures_and_bound(tmp_path):
    events = tmp_path / "events.jsonl"
    watch = EvaluationWatch(events)
    learner = EventWriter(events, "learner")
    learner.emit("learner.evaluate", episodes=20, done=7, steps=12_345, elapsed_s=31.5,
                 limit_s=60.0)  # fmt: skip
    watch.poll()
    assert watch.line() == (
        "final evaluation: 7/20 episodes, 12,345 env steps  [ 31.5s of at most 60 s]"
    )


def test_while_the_learner_evaluates_the_console_shows_the_evaluation_not_stale_training(
    tmp_path,
):
    """The learner's status stands still during its final evaluation: the progress line
    used to print the last update's figures again every 10 s (7 times over Pong's 71 s)."""
    import json

    from ppomq.launch.progress import current_line

    status = json.dumps({"env_steps": 12_288, "sps": 173.0, "mean_return_20": -20.5,
                         "version": 12, "rejects": {}}).encode()  # fmt: skip
    events = tmp_path / "events.jsonl"
    watch = EvaluationWatch(events)
    assert current_line(watch, status, 60.0).startswith("steps   12,288  sps     173")
    EventWriter(events, "learner").emit("learner.evaluate", episodes=10, done=2, steps=3_000,
                                        elapsed_s=12.0, limit_s=60.0)  # fmt: skip
    watch.poll()
    line = current_line(watch, status, 72.0)
    assert line == "final evaluation: 2/10 episodes, 3,000 env steps  [ 12.0s of at most 60 s]"
    assert current_line(EvaluationWatch(None), None, 1.0) is None  # nothing reported yet
