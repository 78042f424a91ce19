"""``promtool test rules`` files as frozen dataclasses (the format of Prometheus 2.42's promtool).

promtool compares floats exactly and annotations literally, so generated tests assert on alerts
(which fire or stay quiet, with which labels and annotations) and never on computed ratios.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from governor.contracts.promql import format_duration


@dataclass(frozen=True)
class InputSeries:
    series: str  # 'name{label="value"}'
    values: str  # promtool expanding notation, e.g. '0+60x120'

    def to_dict(self) -> dict[str, object]:
        return {"series": self.series, "values": self.values}


@dataclass(frozen=True)
class ExpectedAlert:
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    def to_dict(self) -> dict[str, object]:
        return {"exp_labels": dict(sorted(self.labels.items())),
                "exp_annotations": dict(sorted(self.annotations.items()))}


@dataclass(frozen=True)
class AlertCheck:
    eval_seconds: int
    alertname: str
    expected: tuple[ExpectedAlert, ...] = ()  # empty: the alert must be quiet

    def to_dict(self) -> dict[str, object]:
        return {"eval_time": format_duration(self.eval_seconds), "alertname": self.alertname,
                "exp_alerts": [alert.to_dict() for alert in self.expected]}


@dataclass(frozen=True)
class ExprCheck:
    """A PromQL expression's samples at a time. Floats compare exactly, so ``expr`` should yield
    exact values (``bool`` comparisons: 1 or 0)."""

    eval_seconds: int
    expr: str
    samples: tuple[tuple[str, float], ...]  # (series as 'name{labels}' or '{labels}', value)

    def to_dict(self) -> dict[str, object]:
        return {"expr": self.expr, "eval_time": format_duration(self.eval_seconds),
                "exp_samples": [{"labels": labels, "value": value}
                                for labels, value in self.samples]}


@dataclass(frozen=True)
class RuleTest:
    name: str
    interval_seconds: int
    input_series: tuple[InputSeries, ...]
    checks: tuple[AlertCheck, ...]
    expr_checks: tuple[ExprCheck, ...] = ()

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name, "interval": format_duration(self.interval_seconds),
            "input_series": [series.to_dict() for series in self.input_series],
            "alert_rule_test": [check.to_dict() for check in self.checks],
        }
        if self.expr_checks:
            out["promql_expr_test"] = [check.to_dict() for check in self.expr_checks]
        return out


@dataclass(frozen=True)
class TestFile:
    rule_files: tuple[str, ...]  # relative to the test file
    evaluation_interval_seconds: int
    tests: tuple[RuleTest, ...] = field(default_factory=tuple)

    __test__ = False  # not a pytest class, despite the name

    def to_dict(self) -> dict[str, object]:
        return {"rule_files": list(self.rule_files),
                "evaluation_interval": format_duration(self.evaluation_interval_seconds),
                "tests": [test.to_dict() for test in self.tests]}

    @property
    def alertnames(self) -> frozenset[str]:
        return frozenset(check.alertname for test in self.tests for check in test.checks)
