"""One SLO → its recording rules and its multi-window, multi-burn-rate page and ticket alerts.

Per window of :data:`governor.slo.burn.SLI_WINDOWS` the rules record the event rate, the
bad-event rate, their ratio and the burn rate. The period ratio sums 5-minute event rates over the
period, so it is weighted by events: a busy hour counts more than a quiet one, as the objective
means. Budget remaining, objective, period and an info series complete the set for dashboards.
"""

from __future__ import annotations

from collections.abc import Mapping

from governor.alerts import verdict_evidence
from governor.alerts.rules import AlertRule, RecordingRule, RuleFile, RuleGroup, literal
from governor.contracts.declaration import Metric
from governor.contracts.endpoints import JOB_PROBE
from governor.contracts.metrics import probe
from governor.contracts.metrics import slo as n
from governor.contracts.promql import (
    Matcher,
    Selector,
    equal_to,
    format_duration,
    format_number,
    le_matcher,
    parse_selector,
    rate,
    sum_by,
    sum_over_time,
    to_decimal,
)
from governor.slo import class_thresholds
from governor.slo.burn import (
    PERIOD_SLICE_SECONDS,
    SEVERITIES,
    SLI_WINDOWS,
    BurnTier,
    firing_tiers,
    recorded,
)
from governor.slo.fleet import Target
from governor.slo.spec import SLO, LatencySLI, SloSpec


def slo_labels(spec: SloSpec, slo: SLO) -> dict[str, str]:
    """Labels on every series and alert of one SLO: the spec's, the SLO's, then slo and service."""
    return {**spec.labels, **slo.labels, n.LABEL_SLO: slo.name, n.LABEL_SERVICE: spec.service}


def sli_target(spec: SloSpec, metric: str) -> Target:
    """Whose series an SLI counts: the synthetic probe's job for the probe's series
    (``governor probe``), the inference target (``targets`` in the spec) for any other."""
    return Target(JOB_PROBE) if metric in probe.SLI_SERIES else spec.targets.inference


def sli_matchers(spec: SloSpec, sli: LatencySLI) -> tuple[Matcher, ...]:
    """A latency SLI's series: its target's job and selector, then the SLI's own selector."""
    return (*sli_target(spec, sli.metric).matchers(), *equal_to(sli.selector))


def ratio_selector(spec: SloSpec, text: str) -> Selector:
    """A ratio SLI's selector as written, narrowed to its target."""
    written = parse_selector(text)
    return Selector(written.metric,
                    (*sli_target(spec, written.metric).matchers(), *written.matchers))


def _histogram(spec: SloSpec, sli: LatencySLI, suffix: str, *extra: Matcher) -> Selector:
    return Selector(sli.metric + suffix, (*sli_matchers(spec, sli), *extra))


def events_rate(spec: SloSpec, slo: SLO, window: str) -> str:
    """PromQL: all of the SLI's events per second over ``window``."""
    if isinstance(slo.sli, LatencySLI):
        return sum_by((), rate(_histogram(spec, slo.sli, "_count"), window))
    return sum_by((), rate(ratio_selector(spec, slo.sli.total), window))


def good_events_rate(spec: SloSpec, slo: SLO, window: str) -> str:
    """PromQL: a latency SLI's good events per second over ``window``. With request classes
    whose thresholds differ, each class counts at its own threshold: one term per threshold,
    each 0 while its classes have no series yet."""
    assert isinstance(slo.sli, LatencySLI)
    sli = slo.sli
    if not class_thresholds.applies(spec, slo) or len(class_thresholds.groups(spec, slo)) == 1:
        return good_rate(spec, sli, (), sli.threshold_seconds, window)
    terms = [f"  ({good_rate(spec, sli, g.matchers, g.threshold, window)} or vector(0))"
             for g in class_thresholds.groups(spec, slo)]
    return "(\n" + "\n+\n".join(terms) + "\n)"


def good_rate(spec: SloSpec, sli: LatencySLI, matchers: tuple[Matcher, ...], threshold: float,
              window: str, by: tuple[str, ...] = ()) -> str:
    """Observations at or below ``threshold`` per second, of the series ``matchers`` pick."""
    return sum_by(by, rate(_histogram(spec, sli, "_bucket", *matchers, le_matcher(threshold)),
                           window))


def error_events_rate(spec: SloSpec, slo: SLO, window: str) -> str:
    """PromQL: the SLI's bad events per second over ``window``."""
    if isinstance(slo.sli, LatencySLI):
        return f"{events_rate(spec, slo, window)}\n-\n{good_events_rate(spec, slo, window)}"
    # A service that never failed has no error series at all: count that as zero errors.
    return f"{sum_by((), rate(ratio_selector(spec, slo.sli.errors), window))} or vector(0)"


def _window_rules(spec: SloSpec, slo: SLO, window_seconds: int) -> tuple[RecordingRule, ...]:
    window = format_duration(window_seconds)
    return window_rules(
        spec, slo,
        (n.SLI_EVENTS_RATE.at(window_seconds), events_rate(spec, slo, window)),
        (n.SLI_ERROR_EVENTS_RATE.at(window_seconds), error_events_rate(spec, slo, window)),
        n.SLI_ERROR_RATIO.at(window_seconds), n.BURN_RATE.at(window_seconds))


def window_rules(spec: SloSpec, slo: SLO, events: tuple[Metric, str], errors: tuple[Metric, str],
                 ratio: Metric, burn: Metric) -> tuple[RecordingRule, ...]:
    """One window's four recorded series: events and errors per second (each a series and its
    expression), their ratio, and that ratio as a burn rate of the error budget."""
    labels = slo_labels(spec, slo)
    (events_series, events_expr), (errors_series, errors_expr) = events, errors
    return (
        RecordingRule(events_series.name, events_expr, labels),
        RecordingRule(errors_series.name, errors_expr, labels),
        RecordingRule(ratio.name, f"{recorded(errors_series, spec, slo)}\n/\n"
                                  f"{recorded(events_series, spec, slo)}", labels),
        RecordingRule(burn.name,
                      f"{recorded(ratio, spec, slo)} / {format_number(slo.error_budget)}", labels),
    )


def _meta_rules(spec: SloSpec, slo: SLO) -> tuple[RecordingRule, ...]:
    labels = slo_labels(spec, slo)
    budget = format_number(slo.error_budget)
    errors = n.SLI_ERROR_EVENTS_RATE.at(PERIOD_SLICE_SECONDS)
    events = n.SLI_EVENTS_RATE.at(PERIOD_SLICE_SECONDS)
    period = spec.period
    info = dict(labels, objective=format_number(slo.objective), period=period,
                controller=str(slo.controller).lower(),
                kind="latency" if isinstance(slo.sli, LatencySLI) else "ratio")
    if isinstance(slo.sli, LatencySLI):
        info.update(metric=slo.sli.metric,
                    threshold_seconds=format_number(slo.sli.threshold_seconds))
    return (
        RecordingRule(n.SLI_ERROR_RATIO_PERIOD.name,
                      f"{sum_over_time(recorded(errors, spec, slo), period)}\n/\n"
                      f"{sum_over_time(recorded(events, spec, slo), period)}", labels),
        RecordingRule(n.BURN_RATE_PERIOD.name,
                      f"{recorded(n.SLI_ERROR_RATIO_PERIOD, spec, slo)} / {budget}", labels),
        RecordingRule(n.ERROR_BUDGET_REMAINING.name,
                      f"1 - {recorded(n.SLI_ERROR_RATIO_PERIOD, spec, slo)} / {budget}", labels),
        RecordingRule(n.OBJECTIVE.name, f"vector({format_number(slo.objective)})", labels),
        RecordingRule(n.ERROR_BUDGET.name, f"vector({budget})", labels),
        RecordingRule(n.PERIOD.name, f"vector({spec.period_seconds})", labels),
        RecordingRule(n.INFO.name, "vector(1)", info),
    )


def tier_condition(spec: SloSpec, slo: SLO, tier: BurnTier, ratio: n.Windowed = n.SLI_ERROR_RATIO,
                   events: n.Windowed = n.SLI_EVENTS_RATE) -> str:
    """Both of a tier's windows over its threshold (and the traffic guard), on the SLO's own
    recorded series or on their per-class counterparts."""
    threshold = format_number(tier.threshold(spec.period_seconds, slo.error_budget))
    short = recorded(ratio.at(tier.short_seconds), spec, slo)
    long = recorded(ratio.at(tier.long_seconds), spec, slo)
    condition = f"  {short} > {threshold}\nand\n  {long} > {threshold}"
    if slo.min_event_rate_per_second > 0:
        traffic = recorded(events.at(tier.long_seconds), spec, slo)
        condition += f"\nand\n  {traffic} >= {format_number(slo.min_event_rate_per_second)}"
    return f"(\n{condition}\n)"


def burn_rates(spec: SloSpec, tiers: tuple[BurnTier, ...]) -> str:
    """``14.4x the sustainable rate over both 5m and 1h, or …``"""
    return ", or ".join(
        f"{format_number(t.factor(spec.period_seconds))}x the sustainable rate over both "
        f"{format_duration(t.short_seconds)} and {format_duration(t.long_seconds)}"
        for t in tiers)


def quiet_below(slo: SLO) -> str:
    if slo.min_event_rate_per_second <= 0:
        return ""
    return (f" Quiet below {format_number(slo.min_event_rate_per_second)} events/s, where "
            "a single failure would look like a burn.")


def describe(spec: SloSpec, slo: SLO, tiers: tuple[BurnTier, ...]) -> str:
    text = literal(f"{slo.description.strip()} ") if slo.description.strip() else ""
    text += (f"SLO {slo.name} ({format_number(to_decimal(slo.objective) * 100)}% over "
             f"{spec.period}) burns its error budget at more than {burn_rates(spec, tiers)}.")
    return text + quiet_below(slo)


def burn_alerts(spec: SloSpec, slo: SLO) -> tuple[AlertRule, ...]:
    alerts = []
    pace = {n.SEVERITY_PAGE: "fast", n.SEVERITY_TICKET: "steadily"}
    for severity in SEVERITIES:
        tiers = firing_tiers(spec, slo, severity)
        if not tiers:
            continue
        expr = "\nor\n".join(tier_condition(spec, slo, tier) for tier in tiers)
        labels = {**slo_labels(spec, slo), n.LABEL_SEVERITY: severity}
        annotations = {
            "summary": f"{spec.service} SLO {slo.name} is burning its error budget "
                       f"{pace[severity]}",
            "description": describe(spec, slo, tiers),
        }
        alerts.append(AlertRule(slo.camel_name + n.BURN_ALERT_SUFFIX, expr, labels, annotations,
                                query_annotations=verdict_evidence.annotation(spec, slo)))
    return tuple(alerts)


def slo_rule_file(spec: SloSpec, slo: SLO) -> RuleFile:
    windows = tuple(rule for w in SLI_WINDOWS for rule in _window_rules(spec, slo, w))
    return RuleFile(f"slo-{slo.name}", (
        RuleGroup(f"slo-sli-{slo.name}", windows),
        RuleGroup(f"slo-meta-{slo.name}", _meta_rules(spec, slo)),
        RuleGroup(f"slo-alerts-{slo.name}", burn_alerts(spec, slo)),
    ))


def alert_labels(spec: SloSpec, slo: SLO, severity: str) -> Mapping[str, str]:
    return {**slo_labels(spec, slo), n.LABEL_SEVERITY: severity}
