"""One line per event on stdout, plain or JSON (`--log-json`), the same in every service."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import warnings
from typing import Any

# Terminal colour codes (Gymnasium colours every warning it gives, wherever it goes).
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_format_warning = warnings.formatwarning


def strip_ansi(text: str) -> str:
    return ANSI_ESCAPE.sub("", text)


def _plain_formatwarning(*args: Any, **kwargs: Any) -> str:
    """warnings' own format, without colour codes unless stderr is a terminal: in a log
    file or a pipe they are noise around the words."""
    text = _format_warning(*args, **kwargs)
    return text if sys.stderr.isatty() else strip_ansi(text)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, separators=(",", ":"))


def install_plain_warnings() -> None:
    """Warnings printed without colour codes where stderr is no terminal."""
    warnings.formatwarning = _plain_formatwarning


def setup_logging(level: str = "INFO", as_json: bool = False, service: str = "ppomq") -> None:
    """Configure the root logger once per process; safe to call again."""
    handler = logging.StreamHandler(sys.stdout)
    if as_json:
        handler.setFormatter(_JsonFormatter())
    else:
        fmt = logging.Formatter(f"%(asctime)s {service} %(levelname)s %(message)s", "%H:%M:%S")
        fmt.converter = time.gmtime
        handler.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    install_plain_warnings()
