"""Logging set-up shared by the components: one line per event, secrets never printed.

Two formats: ``text`` (the default, for people) and ``json`` (one object per line, for a log
pipeline). A line logged while a traced request is being served carries that request's
``trace_id`` and ``span_id``, so a log line and its trace in Jaeger can be joined::

    setup_logging("info", fmt="json")
    {"time": "2026-12-01T10:00:00.123Z", "level": "WARNING", "logger": "governor.inference…",
     "message": "request … failed mid-stream: …", "trace_id": "4bf92f35…", "span_id": "00f067aa…"}
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import re
import sys
from typing import Final

from opentelemetry import trace

FORMATS: Final = ("text", "json")
# Bearer credentials in anything that reaches a log line (a header echoed in an error, say).
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\",]+")


def redact(text: str) -> str:
    return _BEARER.sub(r"\1***", text)


class TraceContextFilter(logging.Filter):
    """Adds the current span's ids to every record (empty strings outside a traced request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        else:
            record.trace_id = record.span_id = ""
        return True


class RedactingFormatter(logging.Formatter):
    """Formats as usual, then masks any bearer credential that slipped into the message; adds
    the trace id of a traced request."""

    def format(self, record: logging.LogRecord) -> str:
        text = redact(super().format(record))
        trace_id = getattr(record, "trace_id", "")
        return f"{text} trace_id={trace_id}" if trace_id else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, trace ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        line: dict[str, object] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname, "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key in ("trace_id", "span_id"):
            value = getattr(record, key, "")
            if value:
                line[key] = value
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


def setup_logging(level: str = "info", *, fmt: str = "text", stream: object = None) -> None:
    """Configure the root logger once, at a program's entry point (never at import)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.addFilter(TraceContextFilter())
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else
        RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is per request; keep it at warning unless asked for debug.
    if root.level > logging.DEBUG:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


LEVELS: Final = ("debug", "info", "warning", "error")


def add_logging_options(parser: argparse.ArgumentParser, level: str = "info") -> None:
    """``--log-level`` and ``--log-format``, the same on every command."""
    parser.add_argument("--log-level", choices=LEVELS, default=level, help="log level")
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="text, or json: one object per line, with the trace id of a "
                             "traced request")
