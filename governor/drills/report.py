"""What a drill prints: a timeline in seconds since the onset, then one JSON line.

:class:`Timeline` turns polls into news — an SLO starting or stopping to burn, an alert firing,
the verdict's ranking changing, the controller deciding — and keeps what the JSON line reports.
:class:`Result` is that line; its keys are the scoring's (:mod:`governor.drills.score`)::

    >>> lines = []
    >>> timeline = Timeline(lines.append)
    >>> timeline.snapshot(12.0, Snapshot(burns={"itl": 3.2}, alerts=(Alert("ItlP99High"),)))
    >>> lines
    ['   +12.0s  burning: itl (burn 3.2x)', '   +12.0s  alert firing: ItlP99High']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from governor.drills.finding import leading, ranked
from governor.drills.observe import Alert, Decision, Share, Snapshot

BURNING = 1.0  # verdict:burn:ratio at or above it: the SLO burns on that target


def verdict_rows(shares: Sequence[Share]) -> list[dict[str, Any]]:
    return [{"slo": s.slo, "cause": s.cause, "share": round(s.share, 3)} for s in ranked(shares)]


def describe_verdict(shares: Sequence[Share]) -> str:
    """``itl: batching 0.82, kv_cache 0.12; ttft: queue 1.00``."""
    by_slo: dict[str, list[str]] = {}
    for s in ranked(shares):
        by_slo.setdefault(s.slo, []).append(f"{s.cause} {s.share:.2f}")
    return "; ".join(f"{slo}: {', '.join(parts)}" for slo, parts in by_slo.items())


def describe_decision(d: Decision) -> str:
    moved = [f"{k} {d.before.get(k)} → {d.after.get(k)}"
             for k in ("max_num_batched_tokens", "max_num_seqs")
             if d.before.get(k) != d.after.get(k)]
    return (f"controller: {d.action} ({d.reason})"
            + (f": {', '.join(moved)}" if moved else ": limits unchanged"))


@dataclass
class Timeline:
    """Prints each piece of news once, at the poll that brought it, and keeps the tallies."""

    write: Callable[[str], None]
    alerts: list[dict[str, Any]] = field(default_factory=list)
    max_burn: dict[str, float] = field(default_factory=dict)
    max_share: dict[str, float] = field(default_factory=dict)
    verdict_polls: int = 0
    last_verdict: list[Share] = field(default_factory=list)
    # Each change of the leading cause: [seconds, cause or None].
    leading: list[list[Any]] = field(default_factory=list)
    _burning: set[str] = field(default_factory=set)
    _firing: set[Alert] = field(default_factory=set)
    _ranking: tuple[tuple[str, str], ...] = ()
    _error: str | None = None

    def event(self, seconds: float, text: str) -> None:
        self.write(f"{seconds:+8.1f}s  {text}")

    def snapshot(self, seconds: float, snap: Snapshot) -> None:
        if snap.error is not None:
            if snap.error != self._error:
                self.event(seconds, f"cannot read: {snap.error}")
            self._error = snap.error
            return
        self._error = None
        self._burns(seconds, snap.burns)
        self._alerts(seconds, snap.alerts)
        self._verdict(seconds, snap.shares)

    def _burns(self, seconds: float, burns: Mapping[str, float]) -> None:
        for slo, burn in burns.items():
            self.max_burn[slo] = round(max(burn, self.max_burn.get(slo, burn)), 3)
        burning = {slo for slo, burn in burns.items() if burn >= BURNING}
        for slo in sorted(burning - self._burning):
            self.event(seconds, f"burning: {slo} (burn {burns[slo]:.1f}x)")
        for slo in sorted(self._burning - burning):
            self.event(seconds, f"no longer burning: {slo}")
        self._burning = burning

    def _alerts(self, seconds: float, alerts: Sequence[Alert]) -> None:
        for alert in alerts:
            if alert in self._firing:
                continue
            self._firing.add(alert)
            self.alerts.append({"name": alert.name, "severity": alert.severity,
                                "slo": alert.slo, "seconds": round(seconds, 1)})
            extra = ", ".join(x for x in (alert.severity, alert.slo) if x)
            self.event(seconds, f"alert firing: {alert.name}" + (f" ({extra})" if extra else "")
                       + (f": {alert.summary}" if alert.summary else ""))

    def _verdict(self, seconds: float, shares: Sequence[Share]) -> None:
        for s in shares:
            self.max_share[s.cause] = round(max(s.share, self.max_share.get(s.cause, 0.0)), 3)
        if shares:
            self.verdict_polls += 1
            self.last_verdict = list(shares)
        cause = leading(shares)
        if (self.leading[-1][1] if self.leading else None) != cause:
            self.leading.append([round(seconds, 1), cause])
        ranking = tuple((s.slo, s.cause) for s in ranked(shares))
        if ranking != self._ranking:
            self.event(seconds, f"verdict: {describe_verdict(shares)}" if shares
                       else "verdict: none (no SLO burns)")
        self._ranking = ranking

    def decisions(self, seconds: float, decisions: Sequence[Decision]) -> None:
        for d in decisions:
            self.event(seconds, describe_decision(d))


@dataclass
class Result:
    """The last line of a drill: what was injected, what was found, how fast, what the
    controller did."""

    drill: str
    spec: str
    seed: int
    injected: dict[str, Any]
    found: str | None
    verdict: list[dict[str, Any]]
    onset_to_verdict_seconds: float | None
    alerts: list[dict[str, Any]]
    controller_changes: int
    controller_reasons: list[str]
    notes: list[str]
    load_scale: float = 1.0
    expected: str | None = None  # the cause that should lead; None for healthy
    applicable: bool = True  # False: the spec cannot see this cause (not scored)
    verdict_polls: int = 0  # polls after the onset that saw any verdict
    leading: list[list[Any]] = field(default_factory=list)  # [seconds, cause] at each change
    max_burn: dict[str, float] = field(default_factory=dict)
    max_share: dict[str, float] = field(default_factory=dict)
    stock_vllm_spec: bool = False  # the spec reads vLLM's own series (a stock-vLLM fleet)

    def json_line(self) -> str:
        return json.dumps(asdict(self), allow_nan=False)
