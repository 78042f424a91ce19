"""Scoring of a run: attainment, goodput, breach episodes; and the workload's schedule."""

from __future__ import annotations

import math

import numpy as np

from governor.bench.controller.scoring import (
    Episode,
    Missed,
    RequestOutcome,
    WindowScore,
    attainment,
    goodput,
    missed,
    request_tail,
    series_episodes,
    window_scores,
    worst_recovery,
)
from governor.bench.controller.workload import Workload


def test_a_window_fails_on_either_tail_and_passes_without_first_tokens() -> None:
    fast, slow = np.full(200, 0.01), np.full(200, 0.3)
    windows = window_scores([fast, slow, fast, fast], [np.full(5, 0.2), np.full(5, 0.2),
                                                       np.full(5, 2.0), np.zeros(0)],
                            20.0, 0.0, 0.99, 0.99)
    assert [w.meets(0.12, 1.0) for w in windows] == [True, False, False, True]
    assert attainment(windows, itl_slo=0.12, ttft_slo=1.0) == 0.5
    assert math.isnan(windows[3].ttft_tail)


def test_the_windows_missed_say_which_slo_failed() -> None:
    windows = [WindowScore(0, 30, 0.05, 2.0), WindowScore(30, 60, 0.2, 2.0),
               WindowScore(60, 90, 0.05, math.nan), WindowScore(90, 120, 0.05, 0.4)]
    assert missed(windows, itl_slo=0.12, ttft_slo=1.0) == Missed(0.25, 0.5)
    assert missed(windows, itl_slo=0.12, ttft_slo=None) == Missed(0.25, None)


def test_goodput_counts_finished_requests_meeting_both_slos() -> None:
    outcomes = [
        RequestOutcome(1.0, "chat", 0.2, 0.05, True),
        RequestOutcome(2.0, "chat", 1.5, 0.05, True),  # slow first token
        RequestOutcome(3.0, "doc", 0.5, 0.2, True),  # slow decode
        RequestOutcome(4.0, "chat", 0.2, math.nan, True),  # one token: no inter-token gap
        RequestOutcome(5.0, "chat", 0.2, 0.05, False),  # never finished
        RequestOutcome(50.0, "chat", 0.2, 0.05, True),  # outside the interval
    ]
    assert goodput(outcomes, start=0.0, end=10.0, itl_slo=0.12, ttft_slo=1.0) == 0.2


def test_a_requests_tail_is_over_its_own_gaps() -> None:
    assert request_tail([0.0, 0.01, 0.02, 0.32], 0.5) == 0.01
    assert math.isnan(request_tail([1.0], 0.99))


def test_episodes_and_the_worst_recovery() -> None:
    found = series_episodes([(0, 0.1), (10, 0.2), (20, math.nan), (30, 0.1), (40, 0.2)], 0.12)
    assert found == [Episode(10, 30), Episode(40, None)]
    assert worst_recovery(found, run_end=100.0) == 60.0
    assert worst_recovery([], run_end=100.0) is None


def test_the_workload_is_reproducible_and_follows_its_schedule() -> None:
    w = Workload.headline(10.0)
    first, again = w.arrivals(7), w.arrivals(7)
    assert first == again
    assert first != w.arrivals(8)
    docs = [a for a in first if a.kind == "doc"]
    d = w.duration_seconds
    step_at, ramp_end, drop_at = 0.15 * d, 0.6 * d, 0.8 * d
    quiet = sum(1 for a in docs if a.at < step_at) / step_at
    busy = sum(1 for a in docs if ramp_end <= a.at < drop_at) / (drop_at - ramp_end)
    assert quiet < 1.0 < busy
    low, high = next(c for c in w.classes if c.name == "doc").prompt_tokens
    assert all(low <= a.prompt_tokens <= high for a in docs)
