"""Prometheus rules as plain frozen dataclasses, and their YAML-ready dictionaries.

Generators build these; :mod:`governor.alerts.render` dumps them. Keeping the model typed (rather
than nesting dicts everywhere) lets the unit-test generator read an alert's labels and annotations
back and predict exactly what ``promtool test rules`` will see.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from governor.contracts.promql import format_duration

# The only template actions generated annotations contain: a label, or a literal "{{".
_ACTION = re.compile(r'\{\{ (?:\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)|"(\{\{)") \}\}')


def literal(text: str) -> str:
    """User text made safe inside an annotation, which Prometheus expands as a Go template."""
    return text.replace("{{", '{{ "{{" }}')


def expand(template: str, labels: Mapping[str, str]) -> str:
    """What Prometheus makes of an annotation built from :func:`literal` text and
    ``{{ $labels.x }}`` references."""
    return _ACTION.sub(lambda m: m.group(2) or labels.get(m.group(1), ""), template)


def _sorted(labels: Mapping[str, str]) -> dict[str, str]:
    return dict(sorted(labels.items()))


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"record": self.record, "expr": self.expr}
        if self.labels:
            out["labels"] = _sorted(self.labels)
        return out


@dataclass(frozen=True)
class AlertRule:
    alert: str
    expr: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    for_seconds: int = 0
    # Annotations Prometheus fills from a query when the alert fires (a Go template), each with
    # the text it gives where the query finds nothing: what a generated promtool test expects.
    query_annotations: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"alert": self.alert, "expr": self.expr}
        if self.for_seconds:
            out["for"] = format_duration(self.for_seconds)
        out["labels"] = _sorted(self.labels)
        out["annotations"] = _sorted({**self.annotations, **{
            key: template for key, (template, _) in self.query_annotations.items()}})
        return out

    def expected_annotations(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The annotations as they fire on a series with ``labels`` (query annotations as they
        read when their query finds nothing)."""
        expanded = {key: expand(value, labels) for key, value in self.annotations.items()}
        empty = {key: text for key, (_, text) in self.query_annotations.items()}
        return dict(sorted({**expanded, **empty}.items()))


Rule = RecordingRule | AlertRule


@dataclass(frozen=True)
class RuleGroup:
    name: str
    rules: tuple[Rule, ...]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "rules": [rule.to_dict() for rule in self.rules]}

    @property
    def alerts(self) -> tuple[AlertRule, ...]:
        return tuple(rule for rule in self.rules if isinstance(rule, AlertRule))


@dataclass(frozen=True)
class RuleFile:
    """One file under ``prometheus/rules/``, with the promtool tests that cover its alerts."""

    name: str  # file stem, e.g. "slo-availability"
    groups: tuple[RuleGroup, ...]

    def to_dict(self) -> dict[str, object]:
        return {"groups": [group.to_dict() for group in self.groups]}

    @property
    def alerts(self) -> tuple[AlertRule, ...]:
        return tuple(alert for group in self.groups for alert in group.alerts)
