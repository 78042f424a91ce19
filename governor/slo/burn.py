"""Multi-window, multi-burn-rate alert tiers (SRE workbook ch. 5), as data, for any SLO period,
and the selector of an SLO's recorded series: what the rules, the boards and ``governor status``
all read.

A tier fires when the error ratio over both its long and its short window exceeds
``factor * error budget``. The windows are fixed; the factor follows from the share of the
period's budget the tier lets burn before it fires::

    factor = budget_consumed * period / long_window

For 30 days that gives the workbook's 14.4 / 6 / 3 / 1; for 28 days 13.44 / 5.6 / 2.8 / 0.9333.
Arithmetic is decimal and rounded to :data:`SIGNIFICANT_DIGITS`, so thresholds read
``0.0144``, never ``14.4 * 0.0009999999999999432``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Final

from governor.contracts.declaration import Metric
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.slo import SEVERITY_PAGE, SEVERITY_TICKET
from governor.contracts.promql import Selector, eq
from governor.slo.spec import SLO, SloSpec

SIGNIFICANT_DIGITS: Final = 4
MINUTE, HOUR, DAY = 60, 3600, 86400


@dataclass(frozen=True)
class BurnTier:
    severity: str  # SEVERITY_PAGE or SEVERITY_TICKET: the Alertmanager route
    short_seconds: int
    long_seconds: int
    budget_consumed: Decimal  # share of the period's error budget spent when the tier fires

    def factor(self, period_seconds: int) -> Decimal:
        """The burn rate this tier fires at, for an SLO period."""
        exact = self.budget_consumed * Decimal(period_seconds) / Decimal(self.long_seconds)
        return round_significant(exact)

    def threshold(self, period_seconds: int, error_budget: Decimal) -> Decimal:
        """The error ratio both windows must exceed: ``factor * (1 - objective)``."""
        return round_significant(self.factor(period_seconds) * error_budget)

    def can_fire(self, period_seconds: int, error_budget: Decimal) -> bool:
        """A threshold at or above 100% errors can never be crossed (e.g. a 90% SLO's page tier)."""
        return self.threshold(period_seconds, error_budget) < 1


def round_significant(value: Decimal, digits: int = SIGNIFICANT_DIGITS) -> Decimal:
    with localcontext() as context:
        context.prec = digits
        rounded = +value  # unary plus applies the context's precision
    return rounded.normalize()


TIERS: Final[tuple[BurnTier, ...]] = (
    BurnTier(SEVERITY_PAGE, 5 * MINUTE, HOUR, Decimal("0.02")),
    BurnTier(SEVERITY_PAGE, 30 * MINUTE, 6 * HOUR, Decimal("0.05")),
    BurnTier(SEVERITY_TICKET, 2 * HOUR, DAY, Decimal("0.10")),
    BurnTier(SEVERITY_TICKET, 6 * HOUR, 3 * DAY, Decimal("0.10")),
)
SEVERITIES: Final = (SEVERITY_PAGE, SEVERITY_TICKET)

# Every window an SLI error ratio is recorded over: the tiers' windows (5m is also the slice the
# event-weighted period ratio is summed from).
SLI_WINDOWS: Final[tuple[int, ...]] = tuple(
    sorted({t.short_seconds for t in TIERS} | {t.long_seconds for t in TIERS})
)
PERIOD_SLICE_SECONDS: Final = 5 * MINUTE


def firing_tiers(spec: SloSpec, slo: SLO, severity: str) -> tuple[BurnTier, ...]:
    """The tiers of one severity whose threshold an error ratio can actually exceed."""
    return tuple(t for t in TIERS
                 if t.severity == severity and t.can_fire(spec.period_seconds, slo.error_budget))


def recorded(series: Metric, spec: SloSpec, slo: SLO) -> str:
    """A selector for one of this SLO's recorded series."""
    return Selector(series.name, (eq(n.LABEL_SLO, slo.name),
                                  eq(n.LABEL_SERVICE, spec.service))).render()
