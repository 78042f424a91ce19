"""The what-if summary judges attainment against the spec's own objective and says what failed."""

from __future__ import annotations

import doctest

import pytest

import governor.bench.controller as bench
import governor.bench.controller.scoring as scoring
from governor.bench.controller import Score, attainment_line, attainment_target, judge_attainment
from governor.bench.controller.scoring import Missed
from governor.controller.model import Limits, SloTargets

SLO = SloTargets(itl_seconds=0.12, itl_quantile=0.99, ttft_seconds=1.0, ttft_quantile=0.99)


def scored(attainment: float, missed: Missed, limits: Limits | None = None) -> Score:
    return Score("(c) controller" if limits is None else "(b) best static", limits, attainment,
                 1.0, None, 0, 0, 0, 1, missed)


def test_a_replay_where_no_policy_meets_the_slo_is_a_miss_not_a_met_target() -> None:
    """Azure's log at its own rate: every policy met its SLOs in 15-19% of windows, first
    tokens late; the summary had said the attainment target was met since no static limits
    reached it."""
    controlled = scored(0.17, Missed(0.02, 0.83))
    best = scored(0.19, Missed(0.01, 0.81), Limits(2048, 1024))
    judged = judge_attainment(controlled, best, SLO)
    assert judged == {"target": 0.99, "met": False, "best_static_met": False,
                      "windows_missed": {"itl": 0.02, "ttft": 0.83}}
    assert attainment_line(judged, controlled, best) == (
        "attainment: the controller met the SLOs in 17.0% of windows against the spec's 99%: "
        "MISSED (TTFT failed in 83.0% of windows, ITL in 2.0%); no static limits reach it "
        "either (best 19.0%)")


@pytest.mark.parametrize(("controlled", "met"), [(0.99, True), (0.96, False)],
                         ids=["at the spec's objective", "under it, though over 95%"])
def test_the_target_is_the_spec_s_objective(controlled: float, met: bool) -> None:
    best = scored(1.0, Missed(0.0, 0.0), Limits(2048, 1024))
    assert judge_attainment(scored(controlled, Missed(1 - controlled, 0.0)), best, SLO)["met"] \
        is met
    assert attainment_target(SloTargets(0.12, 0.999)) == 0.999  # no TTFT SLO: the ITL's


@pytest.mark.parametrize("module", [bench, scoring])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.failed == 0
