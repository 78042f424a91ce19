"""Log lines a client can cause by the thousand a second: at most one per interval, with a count.

A connection refused is worth telling an operator about, but not once per event.
:class:`RateLimitedLog` logs the first event at once and the rest in one line when the interval
ends::

    refused = RateLimitedLog(log, "connection refused", loop=loop)
    refused.note("(max_connections) from 10.0.0.7", kind="max_connections")
    # WARNING connection refused (max_connections) from 10.0.0.7
    # WARNING connection refused: 1999 more in the last 10 s (max_connections 1999); the latest …
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter


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
