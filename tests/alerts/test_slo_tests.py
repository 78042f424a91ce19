"""The burn-rate scenarios built for any valid objective and period, and what promtool makes of
them: each prediction is clear of every threshold, and the alerts fire as predicted."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts.class_tests import class_tests, combined_threshold_tests
from governor.alerts.render import render_all, write_all
from governor.alerts.slo_tests import Segment, slo_tests, window_is_uniform
from governor.generation.catalog import parse_checked_spec
from governor.slo import class_thresholds
from governor.slo.spec import SloSpec
from tests.alerts import promtool_run
from tests.alerts.cases import ROOT

# Objectives at and inside the ranges where a scenario once fell too near a threshold (on 30
# days: 0.01 to 9.09%, 27 to 36% and 79 to 81% with request classes, 66.67 to 69.69%, 83.34 to
# 84.12%, 93.06 to 93.38%), and the usual ones.
OBJECTIVES = ("0.01", "0.02", "1", "2", "5", "9.09", "27.4", "30.14", "35.62", "50", "66.67",
              "68", "69.69", "79.46", "80.83", "83.34", "84", "93.06", "93.2", "93.38", "99",
              "99.9", "99.99", "99.999")
PERIODS = ("7d", "28d", "30d", "400d")


def spec_with(objective: str, period: str = "30d") -> SloSpec:
    data: dict[str, Any] = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    data["period"] = period
    for slo in data["slos"]:
        slo["objective"] = f"{objective}%"
    return parse_checked_spec(data)


@pytest.mark.parametrize("period", PERIODS)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_and_period_gets_scenarios_clear_of_its_thresholds(
    objective: str, period: str
) -> None:
    spec = spec_with(objective, period)
    for slo in spec.slos:
        tests = [*slo_tests(spec, slo), *combined_threshold_tests(spec, slo)]
        if class_thresholds.applies(spec, slo):
            tests += class_tests(spec, slo)
        assert tests


def test_a_window_within_one_error_ratio_is_uniform_and_one_across_a_change_is_not() -> None:
    healthy, outage = Segment(Decimal(100), Decimal(1), 60), Segment(Decimal(10), Decimal(10), 65)
    same_ratio = Segment(Decimal(1000), Decimal(10), 30)
    assert window_is_uniform([healthy, same_ratio], 90, 86400)
    assert window_is_uniform([healthy, outage], 125, 3600)  # minutes 66-125: the outage only
    assert not window_is_uniform([healthy, outage], 125, 86400)


@pytest.mark.integration
@pytest.mark.parametrize("objective", ["0.02", "1", "5", "30.14", "68", "80.83", "84", "93.2"])
def test_promtool_sees_the_alerts_fire_as_predicted_at_any_objective(
    promtool: str, tmp_path: Path, objective: str
) -> None:
    write_all(render_all(spec_with(objective)), tmp_path)
    tests = sorted((tmp_path / "prometheus/tests").glob("*.test.yml"))
    assert tests
    assert promtool_run.run_all(promtool, tests, tmp_path / "split") == []
