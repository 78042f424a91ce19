"""What a team would see during a drill: the verdict and the burns (Prometheus's query API), the
alerts firing (Prometheus's alerts API) and the controller's decisions (its audit log).

Reading returns plain dataclasses; shaping them is pure (``parse_*``) and tested without the
stack::

    >>> parse_shares([{"metric": {"slo": "itl", "cause": "batching", "instance": "a:1"},
    ...                "value": [0, "0.8"]}])
    [Share(slo='itl', cause='batching', share=0.8, instance='a:1')]
"""

from __future__ import annotations

import datetime as dt
import json
import math
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from governor.common.answers import get_json
from governor.common.prometheus_api import PrometheusError, PrometheusHTTP
from governor.contracts.metrics import verdict as v
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.slo import LABEL_SEVERITY, LABEL_SLO

ALERTS_PATH: Final = "/api/v1/alerts"
_TIMEOUT_SECONDS: Final = 5.0
_MAX_ANSWER_BYTES: Final = 8 * 2**20
_SUMMARY_CHARS: Final = 160


@dataclass(frozen=True, slots=True)
class Share:
    """One cause's share of one SLO's breach on one target."""

    slo: str
    cause: str
    share: float
    instance: str = ""


@dataclass(frozen=True, slots=True)
class Alert:
    """An alert firing in Prometheus, as its labels and its summary say."""

    name: str
    severity: str = ""
    slo: str = ""
    summary: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """One line of the controller's audit log."""

    at: str  # ISO 8601, as the audit log writes it
    action: str
    reason: str
    before: Mapping[str, Any] = field(default_factory=dict)
    after: Mapping[str, Any] = field(default_factory=dict)
    explanation: str = ""

    @property
    def at_unix(self) -> float:
        """Its time as Unix seconds (-inf when the line's time is not ISO 8601)."""
        try:
            return dt.datetime.fromisoformat(self.at).timestamp()
        except ValueError:
            return -math.inf

    @property
    def changed(self) -> bool:
        """Whether the limits moved (a hold, or a new reason for the same limits, does not)."""
        return _limits(self.before) != _limits(self.after)


def _limits(limits: Mapping[str, Any]) -> dict[str, Any]:
    return {k: limits.get(k) for k in ("max_num_seqs", "max_num_batched_tokens")}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One poll: the verdict, each latency SLO's worst burn over the targets, the alerts."""

    shares: tuple[Share, ...] = ()
    burns: Mapping[str, float] = field(default_factory=dict)
    alerts: tuple[Alert, ...] = ()
    error: str | None = None  # why part of it could not be read


def parse_shares(samples: Iterable[Mapping[str, Any]]) -> list[Share]:
    """``verdict:cause:share`` samples, largest share first (NaN and absent values dropped)."""
    shares = []
    for sample in samples:
        labels, value = sample.get("metric") or {}, _value(sample)
        if value is not None:
            shares.append(Share(str(labels.get(LABEL_SLO, "")), str(labels.get(v.LABEL_CAUSE, "")),
                                value, str(labels.get(LABEL_INSTANCE, ""))))
    return sorted(shares, key=lambda s: (-s.share, s.slo, s.cause, s.instance))


def parse_burns(samples: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """``verdict:burn:ratio`` samples: each SLO's highest burn over its targets."""
    burns: dict[str, float] = {}
    for sample in samples:
        value = _value(sample)
        slo = str((sample.get("metric") or {}).get(LABEL_SLO, ""))
        if value is not None:
            burns[slo] = max(value, burns.get(slo, value))
    return dict(sorted(burns.items()))


def _value(sample: Mapping[str, Any]) -> float | None:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def parse_alerts(body: Any) -> list[Alert]:
    """The firing alerts of a ``/api/v1/alerts`` answer (pending ones are not yet news)."""
    data = body.get("data") if isinstance(body, dict) else None
    alerts = (data.get("alerts") if isinstance(data, dict) else None) or []
    found = set()
    for alert in alerts:
        if not isinstance(alert, dict) or alert.get("state") != "firing":
            continue
        labels, notes = alert.get("labels") or {}, alert.get("annotations") or {}
        summary = " ".join(str(notes.get("summary", "")).split())[:_SUMMARY_CHARS]
        found.add(Alert(str(labels.get("alertname", "?")), str(labels.get(LABEL_SEVERITY, "")),
                        str(labels.get(LABEL_SLO, "")), summary))
    return sorted(found, key=lambda a: (a.name, a.slo, a.severity))


def parse_decisions(lines: Iterable[str]) -> list[Decision]:
    """The audit log's lines as decisions (a torn or foreign line is skipped)."""
    decisions = []
    for line in lines:
        try:
            record = json.loads(line)
            decisions.append(Decision(str(record["at"]), str(record["action"]),
                                      str(record["reason"]), dict(record.get("before") or {}),
                                      dict(record.get("after") or {}),
                                      str(record.get("explanation") or "")))
        except (ValueError, KeyError, TypeError):
            continue
    return decisions


class Observer:
    """Reads a drill's stack: its Prometheus and its controller's audit log."""

    def __init__(self, prometheus_url: str, audit_log: Path) -> None:
        self.prometheus = PrometheusHTTP(prometheus_url, timeout_seconds=_TIMEOUT_SECONDS)
        self.audit_log = audit_log

    def snapshot(self) -> Snapshot:
        """The verdict, burns and alerts now; what cannot be read is named in ``error``."""
        try:
            shares = tuple(parse_shares(self.prometheus.instant(v.CAUSE_SHARE.name)))
            burns = parse_burns(self.prometheus.instant(v.BURN.name))
            alerts = tuple(parse_alerts(self._get(ALERTS_PATH)))
        except (urllib.error.URLError, OSError, PrometheusError, ValueError) as exc:
            return Snapshot(error=f"Prometheus: {exc}")
        return Snapshot(shares, burns, alerts)

    def decisions(self) -> list[Decision]:
        """Every decision the controller logged so far."""
        try:
            with self.audit_log.open(encoding="utf-8") as handle:
                return parse_decisions(handle)
        except FileNotFoundError:
            return []

    def _get(self, path: str) -> Any:
        url = self.prometheus.base_url + path
        return get_json(url, limit=_MAX_ANSWER_BYTES, timeout=_TIMEOUT_SECONDS)


def decisions_since(decisions: Sequence[Decision], since_unix: float) -> list[Decision]:
    """The decisions taken at or after ``since_unix``."""
    return [d for d in decisions if d.at_unix >= since_unix]
