"""One line per event on stdout, plain or JSON (`--log-json`), the same in every service."""

from __future__ import annotations

import json
import logging
import sys
import time


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
