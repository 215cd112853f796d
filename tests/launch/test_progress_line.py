"""`ppomq train`'s progress line ends with the side that binds, once the run knows it."""

from __future__ import annotations

from ppomq.launch.progress import progress_line

STATUS = {"env_steps": 13_312, "sps": 141.0, "mean_return_20": -20.5, "version": 13,
          "rejects": {}}  # fmt: skip


def test_the_line_names_the_learner_when_actors_wait_for_its_weights():
    line = progress_line({**STATUS, "learner_wait_fraction": 0.1, "actors_weights_wait": 0.82},
                         103.2)  # fmt: skip
    assert line.endswith("[103.2s]  learner-bound: actors wait 82%")


def test_the_line_names_the_actors_when_the_learner_waits_for_rollouts():
    line = progress_line({**STATUS, "learner_wait_fraction": 0.9, "actors_weights_wait": 0.05},
                         5.0)  # fmt: skip
    assert line.endswith("[  5.0s]  actor-bound: learner waits 90%")
