"""One health alert as a row: its rule, and the promtool scenario that proves it.

A row's scenario is synthetic series in which something goes wrong at minute 10 next to a healthy
neighbour, and the labels of the alerts that must fire (only for the broken one)::

    HealthAlert("GpuLost", SEVERITY_PAGE, MINUTE, 'gpu_up{job="gpu"} == 0', summary, text,
                ((series(gpu.UP.name, gpu0), breaks(1, 0)), (series(gpu.UP.name, gpu1),
                 steady(1))), (gpu0,))

The scenario's series carry the labels a scrape of the spec's target gives (:func:`scraped`), so
alerts and tests follow a fleet's job names and selectors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from governor.alerts.rules import AlertRule
from governor.alerts.ruletests import AlertCheck, ExpectedAlert, InputSeries, RuleTest
from governor.alerts.slo_tests import cumulative
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB
from governor.contracts.metrics.slo import LABEL_SEVERITY
from governor.contracts.promql import Selector, equal_to, format_number
from governor.generation.params import RenderParams
from governor.slo.fleet import Target

MINUTE = 60
BREAKS_AT = 10  # minute at which each scenario's broken series goes wrong
WINDOW = "5m"  # of the counter alerts

Values = Callable[[int], str]  # samples after the first → promtool values


def steady(value: float) -> Values:
    return lambda last: f"{format_number(value)}x{last}"


def breaks(before: float, after: float) -> Values:
    return lambda last: (f"{format_number(before)}x{BREAKS_AT - 1} "
                         f"{format_number(after)}x{last - BREAKS_AT}")


def counter(before: float, after: float) -> Values:
    """A counter growing ``before`` per minute, then ``after`` per minute from minute 10."""
    return lambda last: cumulative([(Decimal(repr(before)), BREAKS_AT - 1),
                                    (Decimal(repr(after)), last - BREAKS_AT + 1)])


def appears(value: float) -> Values:
    """A series that does not exist until minute 10 (a counter's first XID, say)."""
    return lambda last: f"_x{BREAKS_AT} {format_number(value)}x{last - BREAKS_AT}"


def disappears(value: float) -> Values:
    return lambda last: f"{format_number(value)}x{BREAKS_AT - 1} stale"


def clock(stops: bool) -> Values:
    """A Unix-time gauge that follows evaluation time, or freezes at minute 9."""
    frozen = (BREAKS_AT - 1) * MINUTE
    return lambda last: (f"0+{MINUTE}x{BREAKS_AT - 1} {frozen}x{last - BREAKS_AT + 1}" if stops
                         else f"0+{MINUTE}x{last}")


def series(metric: str, labels: dict[str, str]) -> str:
    """A scenario's series: ``metric{labels}``, labels sorted."""
    return Selector(metric, equal_to(labels)).render()


def scraped(target: Target, host: str) -> dict[str, str]:
    """The labels a scrape of ``host`` in ``target``'s job gives its series."""
    return {**target.selector, LABEL_JOB: target.job, LABEL_INSTANCE: host}


@dataclass(frozen=True)
class HealthAlert:
    name: str
    severity: str
    for_seconds: int
    expr: str
    summary: str  # may use {{ $labels.x }}
    description: str
    series: tuple[tuple[str, Values], ...]  # the scenario
    fires: tuple[dict[str, str], ...]  # labels of the alerts it must raise (besides severity)
    # (minute, must fire?) checks; None: quiet at minute 9, firing well after `for`.
    checks: tuple[tuple[int, bool], ...] | None = field(default=None)

    def rule(self, params: RenderParams) -> AlertRule:
        return AlertRule(self.name, self.expr, {LABEL_SEVERITY: self.severity},
                         {"summary": self.summary, "description": self.description},
                         min(self.for_seconds, params.health_for_cap_seconds))

    def test(self, params: RenderParams) -> RuleTest:
        rule = self.rule(params)
        hold = -(-rule.for_seconds // MINUTE)
        checks = self.checks or ((BREAKS_AT - 1, False), (BREAKS_AT + hold + 10, True))
        last = max(minute for minute, _ in checks) + 1
        expected = tuple(
            ExpectedAlert(labels := {**fired, **rule.labels}, rule.expected_annotations(labels))
            for fired in self.fires
        )
        return RuleTest(
            f"{self.name}: fires for the broken series only", MINUTE,
            tuple(InputSeries(name, values(last)) for name, values in self.series),
            tuple(AlertCheck(minute * MINUTE, self.name, expected if firing else ())
                  for minute, firing in checks),
        )


def by_target(target: Target, *more: str) -> tuple[str, ...]:
    """Aggregate per scrape target, keeping the target's selector labels (a fleet's cluster or
    namespace, which its routes and people want on the alert) and ``more``."""
    return (LABEL_JOB, LABEL_INSTANCE, *target.selector, *more)
