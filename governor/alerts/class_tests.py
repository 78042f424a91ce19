"""promtool unit tests for request classes: per-class alerts, and each class judged by its own
threshold (in the per-class rules and in the SLO's own ratio).

Synthetic traffic per class is a list of phases, each a number of minutes of observations at
given latencies; the series are the histogram's buckets at every class threshold, so a rule that
read a class at another class's threshold would count the wrong events and fail its check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from governor.alerts.class_rules import class_burn_alerts
from governor.alerts.rules import AlertRule
from governor.alerts.ruletests import AlertCheck, ExpectedAlert, ExprCheck, InputSeries, RuleTest
from governor.alerts.slo_rules import slo_labels
from governor.alerts.slo_tests import (
    MINUTE,
    Segment,
    as_scraped,
    between,
    clear_of_thresholds,
    cumulative,
    events_per_minute,
    tier_fires,
    tier_thresholds,
)
from governor.alerts.synth import Series
from governor.contracts.declaration import Metric
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.scrape import LABEL_JOB, LABEL_LE
from governor.contracts.metrics.service import LABEL_CLASS
from governor.contracts.promql import exposition_float
from governor.slo import class_thresholds
from governor.slo.burn import SEVERITIES, firing_tiers, recorded
from governor.slo.spec import SLO, LatencySLI, SloSpec


@dataclass(frozen=True)
class Phase:
    """``minutes`` of one class's traffic: ``(latency seconds, events a minute)`` pairs."""

    minutes: int
    observations: tuple[tuple[float, Decimal], ...]

    def segment(self, threshold: float) -> Segment:
        total = sum((count for _, count in self.observations), Decimal(0))
        bad = sum((count for latency, count in self.observations if latency > threshold),
                  Decimal(0))
        return Segment(total, bad, self.minutes)


def _sli(slo: SLO) -> LatencySLI:
    assert isinstance(slo.sli, LatencySLI)
    return slo.sli


def class_series(spec: SloSpec, slo: SLO, name: str,
                 phases: Sequence[Phase]) -> tuple[InputSeries, ...]:
    """One class's histogram series: a bucket at every class threshold, +Inf and the count."""
    sli = _sli(slo)
    edges = (*sorted(set(class_thresholds.thresholds(spec, slo).values())), math.inf)
    target = spec.targets.inference
    labels = {**target.selector, **sli.selector, LABEL_JOB: target.job, LABEL_CLASS: name}
    series = []
    for edge in edges:
        bucket = Series(sli.metric + "_bucket", tuple(sorted(
            {**labels, LABEL_LE: exposition_float(edge)}.items())))
        values = cumulative([(sum((c for latency, c in p.observations if latency <= edge),
                                  Decimal(0)), p.minutes) for p in phases])
        series.append(InputSeries(as_scraped(bucket), values))
    count = Series(sli.metric + "_count", tuple(sorted(labels.items())))
    totals = cumulative([(p.segment(math.inf).total, p.minutes) for p in phases])
    return (*series, InputSeries(as_scraped(count), totals))


def _at(threshold: float, bad_share: Decimal, events: Decimal) -> tuple[tuple[float, Decimal],
                                                                         ...]:
    """Observations at exactly ``threshold`` (good) and just over it (bad)."""
    bad = (events * bad_share).normalize()
    return ((threshold, events - bad), (math.nextafter(threshold, math.inf), bad))


def _labelled(metric: Metric, spec: SloSpec, slo: SLO, name: str | None = None) -> str:
    labels = dict(slo_labels(spec, slo))
    if name is not None:
        labels[LABEL_CLASS] = name
    return Series("", tuple(sorted(labels.items()))).render()


def _own_thresholds(spec: SloSpec, slo: SLO, events: Decimal
                    ) -> tuple[tuple[InputSeries, ...], dict[str, float]]:
    """Every class an hour at its own threshold, then an hour just over it."""
    by_class = class_thresholds.thresholds(spec, slo)
    series = tuple(s for name, t in by_class.items() for s in class_series(
        spec, slo, name, [Phase(60, _at(t, Decimal(0), events)),
                          Phase(60, _at(t, Decimal(1), events))]))
    return series, by_class


def combined_threshold_tests(spec: SloSpec, slo: SLO) -> tuple[RuleTest, ...]:
    """For the SLO's own rules: its error ratio counts each class at that class's threshold."""
    if not class_thresholds.applies(spec, slo) or len(class_thresholds.groups(spec, slo)) < 2:
        return ()
    series, _ = _own_thresholds(spec, slo, events_per_minute(slo, []))
    ratio = recorded(n.SLI_ERROR_RATIO.at(300), spec, slo)
    labels = _labelled(n.SLI_ERROR_RATIO.at(300), spec, slo)
    return (RuleTest(
        f"{slo.name}: each request class counts at its own threshold", MINUTE, series, (),
        (ExprCheck(60 * MINUTE, between(ratio, Decimal("-0.001"), Decimal("0.001")),
                   ((labels, 1),)),
         ExprCheck(120 * MINUTE, between(ratio, Decimal("0.999"), Decimal("1.001")),
                   ((labels, 1),))),
    ),)


def _expected(spec: SloSpec, slo: SLO, alerts: dict[str, AlertRule],
              phases: dict[str, list[Phase]], minute: int) -> tuple[ExpectedAlert, ...]:
    by_class = class_thresholds.thresholds(spec, slo)
    found = []
    for name, own in phases.items():
        segments = [p.segment(by_class[name]) for p in own]
        for severity in SEVERITIES:
            if any(tier_fires(spec, slo, t, segments, minute)
                   for t in firing_tiers(spec, slo, severity)):
                labels = {**slo_labels(spec, slo), n.LABEL_SEVERITY: severity,
                          LABEL_CLASS: name}
                found.append(ExpectedAlert(labels, alerts[severity].expected_annotations(labels)))
    return tuple(found)


def _one_class_burning(spec: SloSpec, slo: SLO, alerts: dict[str, AlertRule], healthy: Decimal,
                       events: Decimal, extra: int) -> RuleTest:
    """The first class fails every request for ``extra`` minutes past the quickest page tier's
    long window, after an hour of healthy traffic; the others stay healthy."""
    by_class = class_thresholds.thresholds(spec, slo)
    name = next(iter(alerts.values())).alert
    burning = spec.classes.classes[0].name
    quickest = min([t.long_seconds for t in firing_tiers(spec, slo, n.SEVERITY_PAGE)]
                   or [3600]) // MINUTE
    end = 60 + quickest + extra
    phases = {c: [Phase(end, _at(t, healthy, events))] for c, t in by_class.items()}
    phases[burning] = [Phase(60, _at(by_class[burning], healthy, events)),
                       Phase(quickest + extra, _at(by_class[burning], Decimal(1), events))]
    series = tuple(s for c, ps in phases.items() for s in class_series(spec, slo, c, ps))
    return RuleTest(
        f"{slo.name}: class {burning} burning its budget alerts for that class alone",
        MINUTE, series, tuple(AlertCheck(minute * MINUTE, name,
                                         _expected(spec, slo, alerts, phases, minute))
                              for minute in (59, end)))


def class_tests(spec: SloSpec, slo: SLO) -> tuple[RuleTest, ...]:
    """For the per-class rules: one class burning pages for it alone; every class judged by its
    own threshold."""
    alerts = {a.labels[n.LABEL_SEVERITY]: a for a in class_burn_alerts(spec, slo)}
    by_class = class_thresholds.thresholds(spec, slo)
    page, ticket = (tier_thresholds(spec, slo, s) for s in (n.SEVERITY_PAGE, n.SEVERITY_TICKET))
    healthy = min([*page, *ticket, Decimal(1)]) / 2
    events = events_per_minute(slo, [healthy])
    tests = []
    if alerts:
        tests.append(clear_of_thresholds(
            lambda extra: _one_class_burning(spec, slo, alerts, healthy, events, extra)))
    series, _ = _own_thresholds(spec, slo, events)
    checks = tuple(
        ExprCheck(minute * MINUTE, between(recorded(n.CLASS_SLI_ERROR_RATIO.at(300), spec, slo),
                                           low, high),
                  tuple((_labelled(n.CLASS_SLI_ERROR_RATIO.at(300), spec, slo, c), 1)
                        for c in sorted(by_class)))
        for minute, low, high in ((60, Decimal("-0.001"), Decimal("0.001")),
                                  (120, Decimal("0.999"), Decimal("1.001"))))
    tests.append(RuleTest(f"{slo.name}: each class is judged by its own threshold", MINUTE,
                          series, (), checks))
    return tuple(tests)
