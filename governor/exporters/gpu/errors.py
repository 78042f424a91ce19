"""Errors met while sampling: counted by kind for ``gpu_exporter_errors_total``, logged once each.

A GPU without ECC or a driver without GPM answers the same error every second for ever; the log
says so once per (kind, place) and the counter carries the rest.

>>> ledger = ErrorLedger()
>>> ledger.record("not_supported", "gpu 0 nvmlDeviceGetPowerUsage", "Not Supported")
>>> dict(ledger.counts())["not_supported"]
1
"""

from __future__ import annotations

import logging
import threading

from governor.contracts.metrics import gpu as m

log = logging.getLogger("governor.exporters.gpu")


class ErrorLedger:
    """Thread-safe: the sampler and the XID watcher both record into it."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._counts: dict[str, int] = dict.fromkeys(m.ERROR_KINDS, 0)
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._log = logger

    def record(self, kind: str, where: str, detail: str, *, level: int = logging.WARNING) -> None:
        with self._lock:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            first = (kind, where) not in self._logged
            self._logged.add((kind, where))
        if first:
            self._log.log(level, "%s: %s (%s; further ones are only counted)", where, detail, kind)

    def forget(self, kind: str, where: str) -> None:
        """Let the next error of this kind at this place be logged again (after a recovery)."""
        with self._lock:
            self._logged.discard((kind, where))

    def counts(self) -> tuple[tuple[str, int], ...]:
        with self._lock:
            return tuple(sorted(self._counts.items()))
