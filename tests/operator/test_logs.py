"""Structured logs: one JSON object per line, and never an exception's text."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from grid.operator import logs
from grid.operator.logs import JsonFormatter

PLANTED = "sk-live-PLANTED-TOKEN-0123456789"


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Restore the root logger's handlers and level after `logs.configure`."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.makeLogRecord(
        {"name": "grid.operator.test", "levelno": logging.INFO, "levelname": "INFO"}
    )
    record.msg, record.args = msg, args or None
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_record_is_one_json_line_with_the_standard_keys() -> None:
    line = JsonFormatter().format(_record("site %s is %s", "west", "Active"))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["msg"] == "site west is Active"
    assert entry["level"] == "info"
    assert entry["logger"] == "grid.operator.test"
    assert entry["ts"].endswith("+00:00")


def test_extra_fields_are_top_level_keys_and_odd_values_become_text() -> None:
    entry = json.loads(
        JsonFormatter().format(
            _record("x", site="west", count=3, ratio=0.5, ok=True, none=None, path=Path("/a"))
        )
    )
    assert entry["site"] == "west"
    assert (entry["count"], entry["ratio"], entry["ok"], entry["none"]) == (3, 0.5, True, None)
    assert entry["path"] == "/a"


def test_a_message_with_newlines_stays_on_one_line() -> None:
    line = JsonFormatter().format(_record("first\nsecond"))
    assert "\n" not in line
    assert json.loads(line)["msg"] == "first\nsecond"


def test_an_exception_is_logged_by_class_name_only(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("info")
    log = logging.getLogger("grid.operator.test")
    try:
        raise RuntimeError(f"upstream said: Authorization: Bearer {PLANTED}")
    except RuntimeError:
        log.exception("request failed", extra={"provider": "openai"})
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["error"] == "RuntimeError"
    assert entry["msg"] == "request failed"
    assert entry["provider"] == "openai"
    assert PLANTED not in err
    assert "Traceback" not in err


def test_configure_sends_json_to_stderr_at_the_chosen_level(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("warning")
    log = logging.getLogger("grid.operator.test")
    log.info("hidden")
    log.warning("shown", extra={"code": "startup_failed"})
    captured = capsys.readouterr()
    assert captured.out == ""
    entries = [json.loads(line) for line in captured.err.splitlines()]
    assert [(e["level"], e["msg"], e["code"]) for e in entries] == [
        ("warning", "shown", "startup_failed")
    ]


def test_configure_quiets_aiohttp_access_logs(root_logging: None) -> None:
    logs.configure("debug")
    assert logging.getLogger("aiohttp.access").level == logging.WARNING
    assert logging.getLogger().level == logging.DEBUG
