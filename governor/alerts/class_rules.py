"""One latency SLO, per request class: recording rules and burn-rate alerts labelled ``class``.

Each class is measured against its own threshold (:mod:`governor.slo.class_thresholds`) and
the SLO's objective, over the same windows and tiers as the SLO itself
(:mod:`governor.alerts.slo_rules`); one rule records every class at once (``sum by (class)``).
So a document class waiting its allowed 20 s does not burn the chats' budget, and a class
burning its own budget pages with ``class`` in its labels::

    InterTokenLatencyClassErrorBudgetBurn{slo="inter-token-latency", class="doc", severity="page"}
"""

from __future__ import annotations

from governor.alerts.rules import AlertRule, RecordingRule, RuleGroup, literal
from governor.alerts.slo_rules import (
    burn_rates,
    good_rate,
    quiet_below,
    sli_matchers,
    slo_labels,
    tier_condition,
    window_rules,
)
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.service import LABEL_CLASS
from governor.contracts.promql import (
    Selector,
    format_duration,
    format_number,
    rate,
    sum_by,
    sum_over_time,
    to_decimal,
)
from governor.slo import class_thresholds
from governor.slo.burn import PERIOD_SLICE_SECONDS, SEVERITIES, SLI_WINDOWS, firing_tiers, recorded
from governor.slo.spec import SLO, LatencySLI, SloSpec

BY_CLASS = (LABEL_CLASS,)


def _sli(slo: SLO) -> LatencySLI:
    if not isinstance(slo.sli, LatencySLI):
        raise ValueError(f"SLO {slo.name}: per-class rules need a latency SLI")
    return slo.sli


def events_by_class(spec: SloSpec, slo: SLO, window: str) -> str:
    sli = _sli(slo)
    return sum_by(BY_CLASS, rate(Selector(sli.metric + "_count", sli_matchers(spec, sli)),
                                 window))


def good_by_class(spec: SloSpec, slo: SLO, window: str) -> str:
    """Each class's observations at or below its own threshold, per second, by class."""
    sli = _sli(slo)
    return "\nor\n".join("  " + good_rate(spec, sli, g.matchers, g.threshold, window, by=BY_CLASS)
                         for g in class_thresholds.groups(spec, slo))


def _window_rules(spec: SloSpec, slo: SLO, window_seconds: int) -> tuple[RecordingRule, ...]:
    window = format_duration(window_seconds)
    events = events_by_class(spec, slo, window)
    return window_rules(
        spec, slo,
        (n.CLASS_SLI_EVENTS_RATE.at(window_seconds), events),
        (n.CLASS_SLI_ERROR_EVENTS_RATE.at(window_seconds),
         f"{events}\n-\n(\n{good_by_class(spec, slo, window)}\n)"),
        n.CLASS_SLI_ERROR_RATIO.at(window_seconds), n.CLASS_BURN_RATE.at(window_seconds))


def _period_rules(spec: SloSpec, slo: SLO) -> tuple[RecordingRule, ...]:
    labels = slo_labels(spec, slo)
    errors = n.CLASS_SLI_ERROR_EVENTS_RATE.at(PERIOD_SLICE_SECONDS)
    events = n.CLASS_SLI_EVENTS_RATE.at(PERIOD_SLICE_SECONDS)
    ratio = recorded(n.CLASS_SLI_ERROR_RATIO_PERIOD, spec, slo)
    return (
        RecordingRule(n.CLASS_SLI_ERROR_RATIO_PERIOD.name,
                      f"{sum_over_time(recorded(errors, spec, slo), spec.period)}\n/\n"
                      f"{sum_over_time(recorded(events, spec, slo), spec.period)}", labels),
        RecordingRule(n.CLASS_ERROR_BUDGET_REMAINING.name,
                      f"1 - {ratio} / {format_number(slo.error_budget)}", labels),
    )


def class_burn_alerts(spec: SloSpec, slo: SLO) -> tuple[AlertRule, ...]:
    alerts = []
    pace = {n.SEVERITY_PAGE: "fast", n.SEVERITY_TICKET: "steadily"}
    for severity in SEVERITIES:
        tiers = firing_tiers(spec, slo, severity)
        if not tiers:
            continue
        expr = "\nor\n".join(tier_condition(spec, slo, tier, n.CLASS_SLI_ERROR_RATIO,
                                            n.CLASS_SLI_EVENTS_RATE) for tier in tiers)
        klass = "{{ $labels.class }}"
        annotations = {
            "summary": f"{spec.service} SLO {slo.name} is burning its error budget "
                       f"{pace[severity]} for request class {klass}",
            "description": f"Requests of class {klass} miss their class's threshold "
                           f"({literal(class_thresholds.describe(spec, slo))}) often enough to "
                           f"spend SLO {slo.name}'s error budget "
                           f"({format_number(to_decimal(slo.objective) * 100)}% over "
                           f"{spec.period}) at more than {burn_rates(spec, tiers)}."
                           + quiet_below(slo),
        }
        alerts.append(AlertRule(slo.camel_name + n.CLASS_BURN_ALERT_SUFFIX, expr,
                                {**slo_labels(spec, slo), n.LABEL_SEVERITY: severity},
                                annotations))
    return tuple(alerts)


def class_rule_groups(spec: SloSpec, slo: SLO) -> tuple[RuleGroup, ...]:
    windows = tuple(rule for w in SLI_WINDOWS for rule in _window_rules(spec, slo, w))
    return (
        RuleGroup(f"slo-class-sli-{slo.name}", windows),
        RuleGroup(f"slo-class-meta-{slo.name}", _period_rules(spec, slo)),
        RuleGroup(f"slo-class-alerts-{slo.name}", class_burn_alerts(spec, slo)),
    )
