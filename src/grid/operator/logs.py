"""Structured JSON logs for long-running Grid processes.

One JSON object per line on stderr: ``ts``, ``level``, ``logger``, ``msg`` and
any ``extra`` fields the call passes. Callers log names, phases, counts and
reason codes, never Secret values, tokens or key material: nothing here can
tell a credential from a name, so the rule is kept at the call sites and a test
scans the output for a planted token.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, int | float | bool | None) else str(value)
        if record.exc_info and record.exc_info[0] is not None:
            entry["error"] = record.exc_info[0].__name__
        return json.dumps(entry, sort_keys=True)


def configure(level: str = "info") -> None:
    """Send every ``grid`` log record to stderr as JSON at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
