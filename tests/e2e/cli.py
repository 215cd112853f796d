"""What the end-to-end tests run: `ppomq` as a user starts it, small and quick."""

from __future__ import annotations

import os
import sys

PPOMQ = [sys.executable, "-m", "ppomq.cli"]
SMALL = [
    "--num-envs", "4", "--num-steps", "32", "--batch-samples", "256",
    "--update-epochs", "4", "--eval-episodes", "2", "--no-progress",
]  # fmt: skip


def clean_env() -> dict[str, str]:
    """The caller's environment without PPOMQ_* settings, which would leak into the run."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
