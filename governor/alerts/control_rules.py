"""The fast alert per controller-linked SLO: ``<Name>P99High``, per inference instance.

Burn-rate alerts answer "is the budget in danger?" over minutes to days; the controller needs
"is the tail over the line right now, and where?". So this alert takes the SLO's quantile over a
short window per ``instance``, fires after a short ``for``, and carries ``severity="control"``,
which Alertmanager routes to the controller's webhook.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from governor.alerts import verdict_evidence
from governor.alerts.rules import AlertRule, RuleFile, RuleGroup
from governor.alerts.ruletests import AlertCheck, ExpectedAlert, InputSeries, RuleTest
from governor.alerts.slo_rules import sli_matchers, slo_labels
from governor.alerts.slo_tests import cumulative
from governor.contracts.endpoints import INFERENCE
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB, LABEL_LE
from governor.contracts.promql import (
    Selector,
    equal_to,
    exposition_float,
    format_duration,
    format_number,
    histogram_quantile,
    to_decimal,
)
from governor.generation.params import RenderParams
from governor.slo.class_thresholds import own_threshold_classes
from governor.slo.spec import SLO, LatencySLI, SloSpec

GROUP = "governor-control"
HEALTHY, BREACHING = INFERENCE.address("inference-0"), INFERENCE.address("inference-1")


def _sli(slo: SLO) -> LatencySLI:
    if not isinstance(slo.sli, LatencySLI):
        raise ValueError(f"SLO {slo.name}: only a latency SLI can drive the controller")
    return slo.sli


def fast_tail(spec: SloSpec, slo: SLO, params: RenderParams) -> str:
    """What the fast alert compares with the threshold: the SLO's quantile over the short
    window, per instance."""
    sli = _sli(slo)
    return histogram_quantile(slo.objective, sli.metric,
                              (*sli_matchers(spec, sli), *own_threshold_classes(spec, slo)),
                              format_duration(params.fast_window_seconds),
                              by=(LABEL_INSTANCE, *spec.targets.inference.selector))


def fast_alert(spec: SloSpec, slo: SLO, params: RenderParams) -> AlertRule:
    sli = _sli(slo)
    threshold = format_number(sli.threshold_seconds)
    window = format_duration(params.fast_window_seconds)
    expr = f"{fast_tail(spec, slo, params)}\n> {threshold}"
    percentile = format_number(to_decimal(slo.objective) * 100)
    return AlertRule(
        alert=slo.camel_name + n.FAST_ALERT_SUFFIX,
        expr=expr,
        labels={**slo_labels(spec, slo), n.LABEL_SEVERITY: n.SEVERITY_CONTROL},
        annotations={
            "summary": f"{slo.name} p{percentile} above {threshold}s on "
                       "{{ $labels.instance }}",
            "description": f"The {window} p{percentile} of {sli.metric} on "
                           "{{ $labels.instance }} is above the SLO threshold of "
                           f"{threshold}s; the controller is asked to act.",
        },
        for_seconds=params.fast_for_seconds,
        query_annotations=verdict_evidence.annotation(spec, slo, instance=True),
    )


def control_rule_file(spec: SloSpec, params: RenderParams) -> RuleFile | None:
    alerts = tuple(fast_alert(spec, slo, params) for slo in spec.slos if slo.controller)
    return RuleFile("control", (RuleGroup(GROUP, alerts),)) if alerts else None


def _over_when_breaching(slo: SLO) -> int:
    """Of 100 observations, how many fall above the threshold while breaching: 10 put any
    quantile over 0.95 clearly above it (p99 lands there); a lower quantile needs them all."""
    return 10 if slo.objective > 0.95 else 100


def _histogram(spec: SloSpec, slo: SLO, instance: str, edges: Sequence[float],
               phases: Sequence[tuple[bool, int]]) -> tuple[InputSeries, ...]:
    """Per phase (breaching?, samples): 100 observations a sample, all at or below the threshold
    when healthy, some in the bucket above it when breaching (so the quantile lands above it)."""
    series = []
    sli, over = _sli(slo), _over_when_breaching(slo)
    target = spec.targets.inference
    labels = {**target.selector, **sli.selector, LABEL_INSTANCE: instance,
              LABEL_JOB: target.job}
    for edge in (*sorted(edges), float("inf")):
        def per_sample(breaching: bool, edge: float = edge) -> int:
            if edge < sli.threshold_seconds:
                return 0
            return 100 - over if breaching and edge == sli.threshold_seconds else 100
        name = Selector(sli.metric + "_bucket",
                        equal_to({**labels, LABEL_LE: exposition_float(edge)})).render()
        values = cumulative([(Decimal(per_sample(b)), count) for b, count in phases])
        series.append(InputSeries(name, values))
    return tuple(series)


def fast_alert_tests(
    spec: SloSpec, params: RenderParams, histograms: Mapping[str, Sequence[float]],
) -> tuple[RuleTest, ...]:
    """One instance breaches for a while, the other stays healthy; the alert names only the
    breaching one, then resolves once its tail is back under the threshold."""
    tests = []
    step = params.scrape_interval_seconds
    window, hold = params.fast_window_seconds, params.fast_for_seconds
    calm = -(-(window + 2 * step) // step)  # samples before the breach, whole
    burn = -(-(window + hold + 4 * step) // step)
    after = -(-(2 * window + 2 * step) // step)
    for slo in spec.slos:
        if not slo.controller:
            continue
        sli, alert = _sli(slo), fast_alert(spec, slo, params)
        edges = histograms.get(sli.metric) or (sli.threshold_seconds, 2 * sli.threshold_seconds)
        series = (*_histogram(spec, slo, HEALTHY, edges, [(False, calm + burn + after)]),
                  *_histogram(spec, slo, BREACHING, edges, [(False, calm), (True, burn),
                                                           (False, after)]))
        labels = {**alert.labels, **spec.targets.inference.selector, LABEL_INSTANCE: BREACHING}
        firing = ExpectedAlert(labels, alert.expected_annotations(labels))
        tests.append(RuleTest(f"{alert.alert}: one instance's tail over the threshold", step,
                              series, (
            AlertCheck(calm * step, alert.alert),
            AlertCheck((calm + burn) * step, alert.alert, (firing,)),
            AlertCheck((calm + burn + after) * step, alert.alert),
        )))
    return tuple(tests)
