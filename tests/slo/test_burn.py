"""Burn-rate tiers: the workbook's factors for 30 days, scaled for any period, without noise."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.slo.burn import SLI_WINDOWS, TIERS, round_significant

DAY = 86400


def test_a_30_day_period_gives_the_workbook_factors() -> None:
    assert [str(t.factor(30 * DAY)) for t in TIERS] == ["14.4", "6", "3", "1"]


def test_a_28_day_period_scales_the_factors() -> None:
    assert [str(t.factor(28 * DAY)) for t in TIERS] == ["13.44", "5.6", "2.8", "0.9333"]


def test_thresholds_are_exact_decimals() -> None:
    budget = Decimal(1) - Decimal("0.999")
    assert [str(t.threshold(30 * DAY, budget)) for t in TIERS] == ["0.0144", "0.006", "0.003",
                                                                   "0.001"]


def test_a_tier_that_needs_more_than_all_errors_cannot_fire() -> None:
    loose = Decimal("0.1")  # a 90% objective: 14.4 x 10% = 144% errors
    assert [t.can_fire(30 * DAY, loose) for t in TIERS] == [False, True, True, True]


def test_the_recorded_windows_cover_every_tier() -> None:
    assert SLI_WINDOWS == (300, 1800, 3600, 7200, 21600, 86400, 259200)


@given(st.integers(7, 400), st.decimals(min_value="0.00001", max_value="0.5", places=5))
def test_any_period_and_budget_give_short_plain_thresholds(days: int, budget: Decimal) -> None:
    for tier in TIERS:
        threshold = tier.threshold(days * DAY, budget)
        assert len(threshold.as_tuple().digits) <= 4
        assert threshold > 0
        assert threshold == round_significant(tier.factor(days * DAY) * budget)


@pytest.mark.parametrize(("value", "rounded"), [("0.933333", "0.9333"), ("14.40", "14.4"),
                                                ("123456", "1.235E+5")])
def test_rounding_keeps_four_significant_digits(value: str, rounded: str) -> None:
    assert str(round_significant(Decimal(value))) == rounded
