"""Alertmanager's webhook (payload version 4): parse strictly, record idempotently.

The webhook does not decide anything: it records which alerts fire (deduplicated by fingerprint,
resolved ones cleared) and wakes the reconciler, which then reads the actual state itself.

>>> book = AlertBook()
>>> payload = parse_webhook(b'{"version": "4", "status": "firing", "alerts": [{"status": '
...     b'"firing", "labels": {"alertname": "InterTokenLatencyP99High", "instance": "a:8000"}, '
...     b'"startsAt": "2026-01-01T00:00:00Z", "fingerprint": "f1"}]}')
>>> book.record(payload, now=0.0)
RecordOutcome(new=1, duplicate=0, resolved=0)
>>> book.record(payload, now=1.0)
RecordOutcome(new=0, duplicate=1, resolved=0)
>>> sorted(book.instances())
['a:8000']
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

# Limits on what one notification may carry; Alertmanager's own are far below these.
MAX_ALERTS = 1000
MAX_LABELS = 64
MAX_LABEL_BYTES = 1024
MAX_FINGERPRINT = 128
# How many alerts the book remembers, and in how many bytes; the oldest resolved ones go first.
MAX_RECORDS = 10_000
MAX_BOOK_BYTES = 32 * 2**20
# What it keeps of each: the labels that name an alert first, values cut to this length.
KEPT_LABELS = 32
KEPT_VALUE_CHARACTERS = 256
ALERTNAME = "alertname"
NAMING_LABELS = frozenset({ALERTNAME, "instance", "severity", "slo", "class"})
# Python's objects around a record's characters (dataclasses, a dict, str headers), measured
# with tracemalloc in tests/controller/test_intake.py.
RECORD_OVERHEAD_BYTES = 500
LABEL_OVERHEAD_BYTES = 150


class IntakeError(ValueError):
    """A webhook body the controller will not take; ``errors`` lists every problem found."""

    def __init__(self, errors: tuple[str, ...]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class Alert:
    fingerprint: str
    status: str  # "firing" | "resolved"
    labels: Mapping[str, str]
    starts_at: str
    ends_at: str

    @property
    def instance(self) -> str | None:
        return self.labels.get("instance")


@dataclass(frozen=True, slots=True)
class WebhookPayload:
    status: str
    group_key: str
    alerts: tuple[Alert, ...]


@dataclass(frozen=True, slots=True)
class RecordOutcome:
    new: int
    duplicate: int
    resolved: int
    # The names (alertname) of the alerts new or resolved here: what the wake-up is for.
    changed: frozenset[str] = field(default=frozenset(), repr=False)


@dataclass(frozen=True, slots=True)
class AlertRecord:
    alert: Alert
    received_at: float  # when this status of the alert first arrived
    seen_at: float  # when Alertmanager last sent it
    size: int = 0  # the estimated bytes it holds


def parse_webhook(raw: bytes) -> WebhookPayload:
    """Validate a notification; raise :class:`IntakeError` naming every problem at once."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise IntakeError((f"body: not JSON ({exc})",)) from None
    except RecursionError:  # Alertmanager's notifications nest four levels deep
        raise IntakeError(("body: JSON nested too deeply",)) from None
    if not isinstance(body, dict):
        raise IntakeError(("body: must be a JSON object",))
    errors: list[str] = []
    if body.get("version") != "4":
        errors.append(f"version: expected \"4\" (Alertmanager webhook v4), got "
                      f"{_show(body.get('version'))}")
    alerts = body.get("alerts")
    if not isinstance(alerts, list):
        errors.append("alerts: must be a list")
        alerts = []
    elif len(alerts) > MAX_ALERTS:
        errors.append(f"alerts: at most {MAX_ALERTS} per notification, got {len(alerts)}")
        alerts = []
    parsed = [_alert(f"alerts[{i}]", a, errors) for i, a in enumerate(alerts)]
    if errors:
        raise IntakeError(tuple(errors))
    return WebhookPayload(_text(body.get("status")), _text(body.get("groupKey")),
                          tuple(a for a in parsed if a is not None))


def _alert(where: str, raw: Any, errors: list[str]) -> Alert | None:
    if not isinstance(raw, dict):
        errors.append(f"{where}: must be an object")
        return None
    before = len(errors)
    status = raw.get("status")
    if status not in ("firing", "resolved"):
        errors.append(f"{where}.status: expected \"firing\" or \"resolved\", got {_show(status)}")
    fingerprint = raw.get("fingerprint")
    if not isinstance(fingerprint, str) or not 0 < len(fingerprint) <= MAX_FINGERPRINT:
        errors.append(f"{where}.fingerprint: must be a non-empty string of at most "
                      f"{MAX_FINGERPRINT} characters")
    labels = _labels(f"{where}.labels", raw.get("labels"), errors)
    if len(errors) > before:
        return None
    return Alert(str(fingerprint), str(status), labels, _text(raw.get("startsAt")),
                 _text(raw.get("endsAt")))


def _labels(where: str, raw: Any, errors: list[str]) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        errors.append(f"{where}: must be an object of string values")
        return {}
    if len(raw) > MAX_LABELS or any(len(k) + len(v) > MAX_LABEL_BYTES for k, v in raw.items()):
        errors.append(f"{where}: at most {MAX_LABELS} labels of {MAX_LABEL_BYTES} bytes each")
        return {}
    return dict(raw)


def _text(value: Any) -> str:
    return value[:256] if isinstance(value, str) else ""


def _show(value: Any) -> str:
    return repr(value)[:40]


class AlertBook:
    """The alerts Alertmanager has told the controller about, by fingerprint.

    A repeated notification (Alertmanager re-sends every ``group_interval``/``repeat_interval``)
    is a duplicate when its status and start time are unchanged, and renews the alert; a
    resolved one clears it. The book is bounded three ways, so no sender can grow the
    controller's memory: in records, in bytes (each record keeps at most :data:`KEPT_LABELS`
    labels of :data:`KEPT_VALUE_CHARACTERS` characters), and in time: an alert not renewed
    within ``expire_after_seconds`` is forgotten, as Alertmanager would have re-sent it were it
    still firing (a "resolved" notification can be lost, or never sent).
    """

    def __init__(self, max_records: int = MAX_RECORDS, max_bytes: int = MAX_BOOK_BYTES,
                 expire_after_seconds: float = math.inf) -> None:
        self._records: dict[str, AlertRecord] = {}
        self._max, self._max_bytes = max_records, max_bytes
        self.expire_after_seconds = expire_after_seconds
        self.bytes = 0  # the estimated size of what is kept

    def __len__(self) -> int:
        return len(self._records)

    def record(self, payload: WebhookPayload, now: float) -> RecordOutcome:
        new = duplicate = resolved = 0
        changed: set[str] = set()
        for alert in payload.alerts:
            kept = _kept(alert)
            known = self._records.get(kept.fingerprint)
            if known is not None and (known.alert.status, known.alert.starts_at) == (
                    kept.status, kept.starts_at):
                duplicate += 1
                self._put(replace(known, seen_at=now))
                continue
            if kept.status == "resolved":
                resolved += 1
            else:
                new += 1
            if ALERTNAME in kept.labels:
                changed.add(kept.labels[ALERTNAME])
            self._put(AlertRecord(kept, now, now, _size(kept)))
        self.expire(now)
        self._evict()
        return RecordOutcome(new, duplicate, resolved, frozenset(changed))

    def expire(self, now: float) -> int:
        """Forget the alerts not renewed within ``expire_after_seconds``; how many."""
        stale = [f for f, r in self._records.items()
                 if now - r.seen_at > self.expire_after_seconds]
        for fingerprint in stale:
            self._drop(fingerprint)
        return len(stale)

    def firing(self) -> list[AlertRecord]:
        return [r for r in self._records.values() if r.alert.status == "firing"]

    def instances(self) -> set[str]:
        """Instances named by firing alerts."""
        return {r.alert.instance for r in self.firing() if r.alert.instance}

    def _put(self, record: AlertRecord) -> None:
        self._drop(record.alert.fingerprint)
        self._records[record.alert.fingerprint] = record
        self.bytes += record.size

    def _drop(self, fingerprint: str) -> None:
        record = self._records.pop(fingerprint, None)
        if record is not None:
            self.bytes -= record.size

    def _evict(self) -> None:
        if len(self._records) <= self._max and self.bytes <= self._max_bytes:
            return
        # Resolved first, then the least recently renewed firing ones: a flood of fingerprints
        # costs memory bounded by max_records and max_bytes, never the alerts that matter most.
        order = sorted(self._records.values(),
                       key=lambda r: (r.alert.status == "firing", r.seen_at))
        for record in order:
            if len(self._records) <= self._max and self.bytes <= self._max_bytes:
                break
            self._drop(record.alert.fingerprint)


def _kept(alert: Alert) -> Alert:
    """What the book keeps of an alert: the labels that name it first, then the others in
    order, at most :data:`KEPT_LABELS` of them, each value cut to
    :data:`KEPT_VALUE_CHARACTERS` (ending in "...", so a cut instance never names a target)."""
    order = sorted(alert.labels, key=lambda k: (k not in NAMING_LABELS, k))[:KEPT_LABELS]
    labels = {_cut(k): _cut(alert.labels[k]) for k in order}
    return replace(alert, labels=labels)


def _cut(value: str) -> str:
    if len(value) <= KEPT_VALUE_CHARACTERS:
        return value
    return value[:KEPT_VALUE_CHARACTERS - 3] + "..."


def _size(alert: Alert) -> int:
    """Roughly what a record costs in memory: Python's objects and their characters."""
    texts = (*alert.labels, *alert.labels.values(), alert.fingerprint, alert.starts_at,
             alert.ends_at)
    return RECORD_OVERHEAD_BYTES + LABEL_OVERHEAD_BYTES * len(alert.labels) + sum(
        len(t) * _width(t) for t in texts)


def _width(text: str) -> int:
    """Bytes per character of a Python string: 1 up to U+00FF, 2 up to U+FFFF, else 4."""
    widest = max(text, default="")
    return 1 if widest <= "\xff" else 2 if widest <= "\uffff" else 4
