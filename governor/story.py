"""What ``governor up --load`` tells while the demo runs: the README's story, each chapter printed
once, when the stack shows it, with the seconds since the load began::

      +0s  load on: chat streams beside long documents (inter-token SLO: p99 <= 120 ms)
     +18s  Prometheus: InterTokenLatencyP99High pending (p99 172 ms over the window)
     +36s  Prometheus: InterTokenLatencyP99High firing
     +36s  Alertmanager: routed it to the controller's webhook
     +37s  controller: its webhook received InterTokenLatencyP99High
     +37s  controller: max_num_batched_tokens 8192 -> 3264 (itl_breach), woken by the alert
     +44s  inter-token p99 back under 120 ms: 94 ms

Reading the stack (Prometheus, Alertmanager, the controller's ``/status``) is :func:`look`, which
returns a plain :class:`Look`; what to print is :meth:`Story.tell`, pure. What started the pass
that made the change is what the controller's audit line of it records (``woken_by``: the alert
its webhook received, by name, or its own periodic check), so a change made on the periodic
check before the alert reached it is told as such.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from governor.alerts.alertmanager import RECEIVER_CONTROLLER
from governor.common.answers import get_json
from governor.common.prometheus_api import MAX_ANSWER_BYTES, PrometheusHTTP
from governor.contracts.alerting import WOKEN_AT_START, WOKEN_BY_ALERT, WOKEN_PERIODIC

_FAILURES = (urllib.error.URLError, OSError, ValueError, KeyError, TypeError)


@dataclass(frozen=True)
class Look:
    """One look at the stack: what each part says about the fast alert and the limits."""

    p99_seconds: float | None = None  # the fast alert's own quantile, now (largest instance)
    alert_state: str | None = None  # in Prometheus: "pending", "firing" or None
    routed_to: tuple[str, ...] = ()  # Alertmanager's receivers of the alert
    received_at: str | None = None  # when the controller's webhook received it (ISO 8601)
    change: Mapping[str, Any] | None = None  # the controller's first change (its audit line)


@dataclass
class Story:
    alert: str  # e.g. InterTokenLatencyP99High
    threshold_seconds: float
    told: set[str] = field(default_factory=set)
    woken_by_alert: bool | None = None  # known once the change is told

    def opening(self) -> str:
        return (f"load on: chat streams beside long documents (inter-token SLO: p99 <= "
                f"{_ms(self.threshold_seconds)})")

    def tell(self, look: Look) -> list[str]:
        """The chapters this look shows that were not told yet, in the story's order."""
        lines: list[str] = []

        def once(chapter: str, line: str) -> None:
            if chapter not in self.told:
                self.told.add(chapter)
                lines.append(line)

        if look.alert_state in ("pending", "firing"):
            once("pending", f"Prometheus: {self.alert} pending"
                 + (f" (p99 {_ms(look.p99_seconds)} over the window)"
                    if look.p99_seconds is not None else ""))
        if look.alert_state == "firing":
            once("firing", f"Prometheus: {self.alert} firing")
        if RECEIVER_CONTROLLER in look.routed_to:
            once("routed", "Alertmanager: routed it to the controller's webhook")
        if look.received_at is not None:
            once("received", f"controller: its webhook received {self.alert}")
        if look.change is not None and "change" not in self.told:
            woken = look.change.get("woken_by")
            woken = woken if isinstance(woken, Mapping) else {}
            self.woken_by_alert = woken.get("by") == WOKEN_BY_ALERT \
                and self.alert in (woken.get("alerts") or ())
            once("change", f"controller: {_change(look.change)}"
                 + _cause(woken, self.alert, received=look.received_at is not None))
        if "change" in self.told and look.p99_seconds is not None \
                and look.p99_seconds <= self.threshold_seconds:
            once("back", f"inter-token p99 back under {_ms(self.threshold_seconds)}: "
                         f"{_ms(look.p99_seconds)}")
        return lines


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _cause(woken: Mapping[str, Any], alert: str, *, received: bool) -> str:
    """What started the controller's pass, as its audit line records it."""
    by, alerts = woken.get("by"), woken.get("alerts") or []
    if by == WOKEN_BY_ALERT:
        return ", woken by the alert" if alert in alerts else \
            f", woken by {', '.join(map(str, alerts)) or 'an alert'}"
    if by == WOKEN_PERIODIC:
        return ", on its own periodic check" + ("" if received else
                                                 ", before the alert reached it")
    if by == WOKEN_AT_START:
        return ", on its first pass at start"
    return ""


def _change(line: Mapping[str, Any]) -> str:
    before, after = line.get("before") or {}, line.get("after") or {}
    moved = [f"{knob} {before.get(knob)} -> {after[knob]}" for knob in sorted(after)
             if before.get(knob) != after[knob]]
    return f"{', '.join(moved) or 'no change'} ({line.get('reason')})"


@dataclass(frozen=True)
class Sources:
    prometheus: str
    alertmanager: str
    controller: str
    p99_expr: str  # the fast alert's quantile, without its comparison
    timeout_seconds: float = 2.0


def look(sources: Sources, alert: str) -> Look:
    """What the stack shows now; a part that does not answer shows nothing."""
    return Look(_p99(sources), _alert_state(sources, alert), _routed(sources, alert),
                *_controller(sources, alert))


def _get(url: str, timeout: float) -> Any:
    # Only governor up's own http://host:port URLs come here.
    return get_json(url, limit=MAX_ANSWER_BYTES, timeout=timeout)


def _p99(sources: Sources) -> float | None:
    try:
        found = PrometheusHTTP(sources.prometheus, timeout_seconds=sources.timeout_seconds
                               ).instant(sources.p99_expr)
        return max((float(r["value"][1]) for r in found), default=None)
    except _FAILURES:
        return None


def _alert_state(sources: Sources, alert: str) -> str | None:
    try:
        found = _get(f"{sources.prometheus}/api/v1/alerts", sources.timeout_seconds)
        states = {a["state"] for a in found["data"]["alerts"]
                  if a["labels"].get("alertname") == alert}
    except _FAILURES:
        return None
    return "firing" if "firing" in states else "pending" if states else None


def _routed(sources: Sources, alert: str) -> tuple[str, ...]:
    query = urllib.parse.urlencode({"filter": f'alertname="{alert}"'})
    try:
        found = _get(f"{sources.alertmanager}/api/v2/alerts?{query}", sources.timeout_seconds)
        return tuple(sorted({r["name"] for a in found for r in a.get("receivers", [])}))
    except _FAILURES:
        return ()


def _controller(sources: Sources, alert: str) -> tuple[str | None, Mapping[str, Any] | None]:
    try:
        status = _get(f"{sources.controller}/status", sources.timeout_seconds)
        received = min((a["received_at"] for a in status.get("alerts", [])
                        if a["labels"].get("alertname") == alert), default=None)
        changes = sorted((d for t in (status.get("targets") or {}).values()
                          for d in t.get("recent_decisions") or [] if d.get("applied")),
                         key=lambda d: str(d.get("at")))
    except _FAILURES:
        return None, None
    return received, changes[0] if changes else None
