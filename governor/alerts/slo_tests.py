"""promtool unit tests for one SLO's burn-rate alerts, built from the SLO itself.

Each test drives synthetic traffic (whole events per minute, so ratios are exact) through the
real SLI selectors and predicts, with exact fractions, which tiers fire: both windows of a tier
must exceed its threshold. Scenarios: healthy traffic stays quiet; a total outage after healthy
traffic pages; a slow burn opens a ticket but no page; with a low-traffic guard, an outage at a
trickle stays quiet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Final, TypeVar

from governor.alerts.rules import AlertRule
from governor.alerts.ruletests import AlertCheck, ExpectedAlert, ExprCheck, InputSeries, RuleTest
from governor.alerts.slo_rules import (
    alert_labels,
    burn_alerts,
    ratio_selector,
    sli_matchers,
    slo_labels,
)
from governor.alerts.synth import Series, matching, split_events
from governor.contracts.endpoints import INFERENCE
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_LE
from governor.contracts.promql import (
    Selector,
    eq,
    exposition_float,
    format_number,
    to_decimal,
)
from governor.slo.burn import SEVERITIES, BurnTier, firing_tiers, recorded
from governor.slo.spec import SLO, LatencySLI, SloSpec

MINUTE = 60
SCRAPE_INSTANCE = INFERENCE.address()
T = TypeVar("T")


class TooClose(ValueError):
    """A scenario whose predicted ratio lies too near a threshold to say whether it fires."""


@dataclass(frozen=True)
class Segment:
    """``minutes`` of traffic: ``total`` events a minute, of which ``bad`` fail."""

    total: Decimal
    bad: Decimal
    minutes: int


def cumulative(increments: Sequence[tuple[Decimal, int]]) -> str:
    """promtool notation for a counter growing by each increment per sample for that many samples,
    starting at 0: [(5, 3), (1, 2)] → ``0+5x3 16+1x1`` (0 5 10 15, then 16 17)."""
    parts: list[str] = []
    last = Decimal(0)
    for index, (step, count) in enumerate(increments):
        if index == 0:
            parts.append(f"0+{format_number(step)}x{count}")
            last = step * count
        else:
            start = last + step
            parts.append(f"{format_number(start)}+{format_number(step)}x{count - 1}")
            last = start + step * (count - 1)
    return " ".join(parts)


def _counter(segments: Sequence[Segment], pick: str) -> str:
    def value(s: Segment) -> Decimal:
        return {"total": s.total, "bad": s.bad, "good": s.total - s.bad}[pick]
    return cumulative([(value(s), s.minutes) for s in segments])


def as_scraped(series: Series) -> str:
    """The series as a scrape stores it: with an instance (the selectors set the job)."""
    labels = dict(series.labels)
    labels.setdefault(LABEL_INSTANCE, SCRAPE_INSTANCE)
    return Series(series.metric, tuple(sorted(labels.items()))).render()


def traffic(spec: SloSpec, slo: SLO, segments: Sequence[Segment]) -> tuple[InputSeries, ...]:
    """Counter series that the SLO's own selectors read as these good and bad events."""
    sli = slo.sli
    if isinstance(sli, LatencySLI):
        selector = sli_matchers(spec, sli)
        le = exposition_float(sli.threshold_seconds)
        bucket = matching(Selector(sli.metric + "_bucket", (*selector, eq(LABEL_LE, le))))
        inf = matching(Selector(sli.metric + "_bucket", (*selector, eq(LABEL_LE, "+Inf"))))
        count = matching(Selector(sli.metric + "_count", selector))
        return (InputSeries(as_scraped(bucket), _counter(segments, "good")),
                InputSeries(as_scraped(inf), _counter(segments, "total")),
                InputSeries(as_scraped(count), _counter(segments, "total")))
    errors, total = ratio_selector(spec, sli.errors), ratio_selector(spec, sli.total)
    if errors.metric == total.metric:
        bad, good = split_events(errors, total)
        return (InputSeries(as_scraped(bad), _counter(segments, "bad")),
                InputSeries(as_scraped(good), _counter(segments, "good")))
    return (InputSeries(as_scraped(matching(errors)), _counter(segments, "bad")),
            InputSeries(as_scraped(matching(total)), _counter(segments, "total")))


def window_ratio(segments: Sequence[Segment], at_minute: int, window_seconds: int) -> Fraction:
    """The error ratio rate() sees over a window: increments in (t - window, t], exactly."""
    start = max(0, at_minute - window_seconds // MINUTE)
    bad = total = Fraction(0)
    minute = 0
    for segment in segments:
        for _ in range(segment.minutes):
            minute += 1
            if start < minute <= at_minute:
                bad += Fraction(segment.bad)
                total += Fraction(segment.total)
    return bad / total if total else Fraction(0)


def window_is_uniform(segments: Sequence[Segment], at_minute: int, window_seconds: int) -> bool:
    """Every event in the window comes from traffic of one error ratio. rate() then reads that
    ratio exactly: its extrapolation scales bad and total events alike. Across a change of
    ratio it drops or stretches the edge's increments, so the ratio it reads is approximate."""
    start = max(0, at_minute - window_seconds // MINUTE)
    ratios, minute = set(), 0
    for segment in segments:
        first, minute = minute + 1, minute + segment.minutes
        if segment.total and first <= at_minute and minute > start:
            ratios.add(Fraction(segment.bad) / Fraction(segment.total))
    return len(ratios) <= 1


# How near a tier's threshold a scenario's ratio may come: rate() reads a uniform window exactly
# (float rounding aside), a window across a change of ratio only to within a few percent.
EXACT_MARGIN = Fraction(1, 10**9)
MIXED_MARGIN = Fraction(1, 20)


def tier_fires(spec: SloSpec, slo: SLO, tier: BurnTier, segments: Sequence[Segment],
                at_minute: int) -> bool:
    threshold = Fraction(tier.threshold(spec.period_seconds, slo.error_budget))
    fires = []
    for window in (tier.short_seconds, tier.long_seconds):
        ratio = window_ratio(segments, at_minute, window)
        uniform = window_is_uniform(segments, at_minute, window)
        if abs(ratio - threshold) <= threshold * (EXACT_MARGIN if uniform else MIXED_MARGIN):
            raise TooClose(f"scenario too close to the {tier.severity} threshold {threshold}")
        fires.append(ratio > threshold)
    return all(fires)


# Minutes an outage outlasts the quickest page tier's long window, tried in order: the slower
# tiers' windows then mix healthy and failing traffic, which rate() reads only approximately,
# and the first length that keeps each such ratio clear of its threshold is used.
OUTAGE_EXTRA_MINUTES: Final = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240)


def clear_of_thresholds(build: Callable[[int], T]) -> T:
    """``build(extra)`` for the first of :data:`OUTAGE_EXTRA_MINUTES` that is not
    :class:`TooClose` to a threshold."""
    for extra in OUTAGE_EXTRA_MINUTES[:-1]:
        try:
            return build(extra)
        except TooClose:
            continue
    return build(OUTAGE_EXTRA_MINUTES[-1])


def _expected(spec: SloSpec, slo: SLO, alerts: dict[str, AlertRule], segments: Sequence[Segment],
              at_minute: int, traffic_ok: bool = True) -> tuple[ExpectedAlert, ...]:
    found = []
    for severity in SEVERITIES:
        tiers = firing_tiers(spec, slo, severity)
        if traffic_ok and any(tier_fires(spec, slo, t, segments, at_minute) for t in tiers):
            labels = dict(alert_labels(spec, slo, severity))
            found.append(ExpectedAlert(labels, alerts[severity].expected_annotations(labels)))
    return tuple(found)


def _decimal_places(value: Decimal) -> int:
    exponent = value.normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def events_per_minute(slo: SLO, ratios: Sequence[Decimal]) -> Decimal:
    """A traffic level at which every ratio is a whole number of bad events, and that clears
    the low-traffic guard four times over."""
    total = Decimal(10) ** max([2, *(_decimal_places(r) for r in ratios)])
    while total / MINUTE < 4 * to_decimal(slo.min_event_rate_per_second):
        total *= 10
    return total


def tier_thresholds(spec: SloSpec, slo: SLO, severity: str) -> list[Decimal]:
    return [t.threshold(spec.period_seconds, slo.error_budget)
            for t in firing_tiers(spec, slo, severity)]


def between(series: str, low: Decimal, high: Decimal) -> str:
    return (f"({series} > bool {format_number(low)}) * ({series} < bool {format_number(high)})")


def _weighting_test(spec: SloSpec, slo: SLO) -> RuleTest:
    """An hour at 100 events a minute, half of them bad, then an hour at 900 a minute, all good:
    5% of events were bad. An average of 5-minute ratios would say about 25%."""
    segments = [Segment(Decimal(100), Decimal(50), 60), Segment(Decimal(900), Decimal(0), 60)]
    ratio = recorded(n.SLI_ERROR_RATIO_PERIOD, spec, slo)
    remaining = recorded(n.ERROR_BUDGET_REMAINING, spec, slo)
    budget = slo.error_budget
    labels = Series("", tuple(sorted(slo_labels(spec, slo).items()))).render()
    return RuleTest(
        f"{slo.name}: the period ratio counts events, not 5-minute slices", MINUTE,
        traffic(spec, slo, segments), (),
        (ExprCheck(120 * MINUTE, between(ratio, Decimal("0.04"), Decimal("0.06")),
                   ((labels, 1),)),
         ExprCheck(120 * MINUTE, between(remaining, 1 - Decimal("0.06") / budget,
                                         1 - Decimal("0.04") / budget), ((labels, 1),))),
    )


def slo_tests(spec: SloSpec, slo: SLO) -> tuple[RuleTest, ...]:
    alerts = {a.labels[n.LABEL_SEVERITY]: a for a in burn_alerts(spec, slo)}
    if not alerts:  # no tier can fire: only the recording rules are left to test
        return (_weighting_test(spec, slo),)
    name = next(iter(alerts.values())).alert
    page = tier_thresholds(spec, slo, n.SEVERITY_PAGE)
    ticket = tier_thresholds(spec, slo, n.SEVERITY_TICKET)
    healthy = min(page + ticket) / 2
    slow = (max(ticket) + min([*page, Decimal(1)])) / 2 if ticket else None
    ratios = [r for r in (healthy, slow) if r is not None]
    events = events_per_minute(slo, ratios)

    def segment(ratio: Decimal, minutes: int, total: Decimal = events) -> Segment:
        return Segment(total, (total * ratio).normalize(), minutes)

    def test(title: str, segments: list[Segment], checks: list[tuple[int, bool]]) -> RuleTest:
        return RuleTest(f"{slo.name}: {title}", MINUTE, traffic(spec, slo, segments), tuple(
            AlertCheck(minute * MINUTE, name,
                       _expected(spec, slo, alerts, segments, minute, traffic_ok))
            for minute, traffic_ok in checks))

    tests = [test("healthy traffic stays quiet", [segment(healthy, 180)],
                  [(30, True), (90, True), (180, True)])]
    if page:
        # Long enough for the quickest page tier that can fire to see nothing but errors.
        quickest = min(t.long_seconds for t in firing_tiers(spec, slo, n.SEVERITY_PAGE)) // MINUTE
        tests.append(clear_of_thresholds(lambda extra: test(
            "a total outage after healthy traffic pages",
            [segment(healthy, 60), segment(Decimal(1), quickest + extra)],
            [(59, True), (60 + quickest + extra, True)])))
    if slow is not None:
        tests.append(test("a slow burn opens a ticket and no page", [segment(slow, 150)],
                          [(150, True)]))
    tests.append(_weighting_test(spec, slo))
    if slo.min_event_rate_per_second > 0:
        trickle = to_decimal(slo.min_event_rate_per_second) * MINUTE / 4
        tests.append(test("an outage at a trickle below the traffic guard stays quiet",
                          [segment(Decimal(1), 190, trickle)], [(70, False), (190, False)]))
    return tuple(tests)
