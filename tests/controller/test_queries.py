"""The controller's PromQL: the SLO's quantile and windows, escaped selectors, its targets."""

from __future__ import annotations

from governor.controller.queries import HistogramSli, QuerySet


def test_the_tails_use_the_slo_quantile_and_both_windows() -> None:
    exprs = QuerySet(HistogramSli("m_itl"), 0.995, HistogramSli("m_ttft"), 0.9,
                     short_window_seconds=20, long_window_seconds=600).expressions()
    assert exprs["itl_tail_seconds"] == (
        "histogram_quantile(0.995, sum by (instance, le) (rate(m_itl_bucket[20s])))")
    assert "[600s]" in exprs["itl_tail_long_seconds"]
    assert exprs["itl_median_seconds"].startswith("histogram_quantile(0.5,")
    assert exprs["ttft_tail_seconds"].startswith("histogram_quantile(0.9,")


def test_selectors_are_escaped_and_a_missing_ttft_slo_drops_its_query() -> None:
    hostile = HistogramSli("m", {"route": 'a"b\\c', "model": "x"})
    exprs = QuerySet(hostile, 0.99, None, 0.99).expressions()
    assert 'm_bucket{model="x", route="a\\"b\\\\c"}' in exprs["itl_tail_seconds"]
    assert "ttft_tail_seconds" not in exprs


def test_targets_are_the_scraped_instances_of_the_job() -> None:
    assert QuerySet.default().targets() == 'up{job="inference"}'


def test_good_event_rates_read_the_buckets_at_the_slo_thresholds() -> None:
    exprs = QuerySet(HistogramSli("m_itl", {"model": "x"}, 0.12), 0.99,
                     HistogramSli("m_ttft", {}, 1.0), 0.99).expressions()
    assert exprs["ttft_good_per_second"] == (
        'sum by (instance) (rate(m_ttft_bucket{le="1.0"}[30s]))')
    assert exprs["ttft_per_second"] == "sum by (instance) (rate(m_ttft_count[30s]))"
    assert exprs["itl_good_ratio"] == (
        'sum by (instance) (rate(m_itl_bucket{model="x", le="0.12"}[30s]))\n/\n'
        'sum by (instance) (rate(m_itl_count{model="x"}[30s]))')
    # Without thresholds (a QuerySet built by hand) there is nothing to count good events by.
    plain = QuerySet(HistogramSli("m_itl"), 0.99, HistogramSli("m_ttft"), 0.99).expressions()
    assert "itl_good_ratio" not in plain and "ttft_good_per_second" not in plain
