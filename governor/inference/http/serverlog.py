"""Log lines a client can cause by the thousand a second: at most one per interval, with a count.

A connection refused, or a malformed HTTP request (which aiohttp's own handler logs as an ERROR
with a traceback, one each), is worth telling an operator about, but not once per event: 2,000
bad requests in 1.4 s made 1.17 MB of tracebacks. :class:`RateLimitedLog` logs the first event
at once and the rest in one line when the interval ends; :class:`ServerLog` routes aiohttp's
malformed-request errors into one, and leaves every other line of aiohttp's as it was::

    malformed = RateLimitedLog(log, "malformed HTTP request", loop=loop)
    web.AppRunner(app, logger=ServerLog(logging.getLogger("aiohttp.server"), malformed))
    # WARNING malformed HTTP request from 10.0.0.7: 400, message: Invalid method encountered…
    # WARNING malformed HTTP request: 1999 more in the last 10 s; the latest from 10.0.0.7: …
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

# Longest error message that reaches a log line.
_DETAIL_CHARS = 300
# Where aiohttp's message starts quoting what the client sent (a header line: it may hold a
# credential of any kind, not only a bearer token the log formatter masks).
_QUOTED = re.compile(r"""\s*:?\s*b['"].*""", re.DOTALL)


class RateLimitedLog:
    """One line at once, then at most one per ``interval_seconds``, counting what it did not
    log (by ``kind``, when given) and quoting the latest."""

    def __init__(self, log: logging.Logger, what: str, *, loop: asyncio.AbstractEventLoop,
                 interval_seconds: float = 10.0, level: int = logging.WARNING) -> None:
        self._log, self._what, self._loop = log, what, loop
        self._interval, self._level = interval_seconds, level
        self._quiet_until = -float("inf")
        self._pending: Counter[str] = Counter()
        self._latest = ""
        self._flushing: asyncio.TimerHandle | None = None

    def note(self, detail: str, kind: str = "") -> None:
        now = self._loop.time()
        if not self._pending and now >= self._quiet_until:
            self._log.log(self._level, "%s %s", self._what, detail)
            self._quiet_until = now + self._interval
            return
        self._pending[kind] += 1
        self._latest = detail
        if self._flushing is None:
            self._flushing = self._loop.call_at(self._quiet_until, self.flush)

    def flush(self) -> None:
        """Log what was counted (at the end of the interval, or when the listener stops)."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        if not self._pending:
            return
        count = self._pending.total()
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self._pending.items()) if kind)
        self._log.log(self._level, "%s: %d more in the last %g s%s; the latest %s", self._what,
                      count, self._interval, f" ({kinds})" if kinds else "", self._latest)
        self._pending.clear()
        self._quiet_until = self._loop.time() + self._interval


class ServerLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger, with each malformed request (a parser error: bad request line,
    header or framing, answered 400 by aiohttp itself) noted in ``malformed`` instead of logged
    with its traceback."""

    def __init__(self, logger: logging.Logger, malformed: RateLimitedLog) -> None:
        super().__init__(logger, {})
        self._malformed = malformed

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        error = kwargs.get("exc_info")
        if level > logging.DEBUG and isinstance(error, HttpProcessingError):
            peer = args[0] if args else None
            self._malformed.note(f"from {peer or 'an unknown address'}: {one_line(error)}")
            return
        super().log(level, msg, *args, **kwargs)


def one_line(error: BaseException) -> str:
    """An error's message on one line, short, without the bytes of the request it quotes."""
    text = _QUOTED.sub("", " ".join(str(error).split())) or type(error).__name__
    return text if len(text) <= _DETAIL_CHARS else text[:_DETAIL_CHARS] + "…"
