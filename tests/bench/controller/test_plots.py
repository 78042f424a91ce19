"""The what-if's comparison plot draws each SLO the runs are judged on, as the figure it builds
shows (its axes, lines and titles), not as PNG bytes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.axes import Axes

from governor.bench.controller.loop import PolicyRun
from governor.bench.controller.plots import comparison_figure
from governor.bench.controller.scoring import WindowScore
from governor.controller.model import Limits, SloTargets

LIMITS = Limits(1024, 8192)
# Four 30 s windows: the inter-token tail always within 120 ms; the first token over 1 s in
# half of them for the static run, in none for the controller.
WINDOWS = {"a (static 8192)": [(0.08, 1.4), (0.09, 0.6), (0.07, 2.0), (0.08, 0.5)],
           "c (controller)": [(0.06, 0.4), (0.07, 0.5), (0.06, 0.3), (0.07, 0.6)]}


def run(name: str) -> PolicyRun:
    windows = [WindowScore(30.0 * k, 30.0 * (k + 1), itl, ttft)
               for k, (itl, ttft) in enumerate(WINDOWS[name])]
    return PolicyRun(name, name.startswith("c"), LIMITS, windows, [], [(0.0, LIMITS)], [], [],
                     [], [], [], 120.0)


def drawn(ax: Axes) -> dict[str, list[float]]:
    """Each line's label → its values."""
    return {str(line.get_label()): np.asarray(line.get_ydata(), dtype=float).tolist()
            for line in ax.get_lines()}


@pytest.fixture
def runs() -> list[PolicyRun]:
    return [run(name) for name in WINDOWS]


def test_with_a_ttft_slo_its_tail_is_drawn_beside_the_inter_token_one(
        runs: list[PolicyRun]) -> None:
    fig = comparison_figure(runs, SloTargets(0.12, 0.99, 1.0, 0.99))
    try:
        itl, ttft = fig.axes
        assert itl.get_ylabel() == "ITL p99 per window (ms)"
        assert ttft.get_ylabel() == "TTFT p99 per window (ms)"
        assert drawn(ttft) == {
            "a (static 8192)": [1400.0, 600.0, 2000.0, 500.0],
            "c (controller)": [400.0, 500.0, 300.0, 600.0],
            "SLO": [1000.0, 1000.0]}
        assert drawn(itl)["SLO"] == [120.0, 120.0]
        # Each titled with the share of windows over its SLO: the TTFT is what failed.
        assert ttft.get_title(loc="left") == "TTFT: windows over the SLO: a 50%, c 0%"
        assert itl.get_title(loc="left") == "ITL: windows over the SLO: a 0%, c 0%"
    finally:
        plt.close(fig)


def test_without_a_ttft_slo_only_the_inter_token_tail_is_drawn(runs: list[PolicyRun]) -> None:
    fig = comparison_figure(runs, SloTargets(0.12, 0.99))
    try:
        (itl,) = fig.axes
        assert itl.get_ylabel() == "ITL p99 per window (ms)"
    finally:
        plt.close(fig)
