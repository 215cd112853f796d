"""The launcher's reading of a service's own one-line reason from its log."""

from __future__ import annotations

from pathlib import Path

from ppomq.launch.messages import last_error_line


def test_the_last_whole_error_line_of_a_log_is_its_reason(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    log.write_text("ppomq: error: first\nsome output\nppomq: error: cannot write /a/b: full\n")
    assert last_error_line(log) == "cannot write /a/b: full"


def test_an_error_line_cut_off_by_a_full_disk_is_not_taken_for_the_reason(tmp_path: Path) -> None:
    # The log lives on the disk that filled: the service's line can stop mid-path, and a
    # reason read from it would name a path that is not there.
    log = tmp_path / "learner.log"
    log.write_text("ppomq: error: cannot write /tmp/run/dis")
    assert last_error_line(log) is None
