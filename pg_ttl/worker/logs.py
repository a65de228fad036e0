"""Structured log lines: ``key=value`` (default, grep- and journald-friendly) or JSON.

Every record carries a message plus fields passed as ``extra={"fields": {...}}``;
the worker logs table, partition, rows and duration that way, so a line reads
``ts=... level=info msg="run finished" db=prod table=public.events rows_deleted=10 duration=0.120``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LOGGER_NAME = "pg_ttl.worker"
FORMATS = ("kv", "json")


def _ts(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _kv_value(value: Any) -> str:
    value = _plain(value)
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if text == "" or any(c in text for c in ' "=\\\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [f"ts={_ts(record)}", f"level={record.levelname.lower()}", f"msg={_kv_value(record.getMessage())}"]
        parts += [f"{k}={_kv_value(v)}" for k, v in _fields(record).items()]
        if record.exc_info:
            parts.append(f"exc={_kv_value(self.formatException(record.exc_info))}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": _ts(record), "level": record.levelname.lower(), "msg": record.getMessage()}
        for k, v in _fields(record).items():
            doc.setdefault(k, _plain(v))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def make_formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return JsonFormatter() if fmt == "json" else KeyValueFormatter()


def setup(fmt: str = "kv", level: str = "info", stream: TextIO | None = None) -> logging.Logger:
    """Configure the worker logger (idempotent: a reload swaps format and level in place)."""
    logger = logging.getLogger(LOGGER_NAME)
    handler = next((h for h in logger.handlers if getattr(h, "_pg_ttl", False)), None)
    if handler is None:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler._pg_ttl = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    handler.setFormatter(make_formatter(fmt))
    logger.setLevel(parse_level(level))
    logger.propagate = False
    return logger


def parse_level(level: str) -> int:
    value = logging.getLevelName(level.upper())
    if not isinstance(value, int):
        raise ValueError(f"log level must be debug, info, warning or error, not {level!r}")
    return value


def log(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    logger.log(level, msg, extra={"fields": fields})
