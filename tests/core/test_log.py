"""What the services print about themselves reads as plain text where it is not a
terminal: Gymnasium colours its warnings with terminal codes, which a log file or a pipe
showed as raw escapes around the words."""

from __future__ import annotations

import subprocess
import sys

WARN_LIKE_GYMNASIUM = """
import warnings
from gymnasium.utils import colorize
from ppomq.core.log import setup_logging
setup_logging("INFO", service="test")
warnings.warn(colorize("WARN: the environment is out of date", "yellow"), stacklevel=1)
"""


def test_a_gymnasium_warning_in_a_log_file_has_no_colour_codes():
    out = subprocess.run([sys.executable, "-c", WARN_LIKE_GYMNASIUM], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "WARN: the environment is out of date" in out.stderr
    assert "\x1b[" not in out.stderr
