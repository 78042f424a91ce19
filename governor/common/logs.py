"""Logging set-up shared by the components: one line per event, secrets never printed."""

from __future__ import annotations

import logging
import re
import sys

# Bearer credentials in anything that reaches a log line (a header echoed in an error, say).
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\",]+")


class RedactingFormatter(logging.Formatter):
    """Formats as usual, then masks any bearer credential that slipped into the message."""

    def format(self, record: logging.LogRecord) -> str:
        return _BEARER.sub(r"\1***", super().format(record))


def setup_logging(level: str = "info", *, stream: object = None) -> None:
    """Configure the root logger once, at a program's entry point (never at import)."""
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(
        RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is per request; keep it at warning unless asked for debug.
    if root.level > logging.DEBUG:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
