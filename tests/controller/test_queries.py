"""The controller's PromQL reads the metric names the inference service really exposes."""

from __future__ import annotations

from governor.controller import queries
from governor.controller.queries import HistogramSli, QuerySet
from governor.inference import metric_names as inference_names


def test_every_metric_name_in_the_queries_is_the_inference_services_own() -> None:
    counter = inference_names.counter_series
    assert queries.ITL_HISTOGRAM == inference_names.INTER_TOKEN_LATENCY
    assert queries.TTFT_HISTOGRAM == inference_names.TIME_TO_FIRST_TOKEN
    assert counter(inference_names.VLLM_PROMPT_TOKENS) == queries.PROMPT_TOKENS_TOTAL
    assert counter(inference_names.VLLM_GENERATION_TOKENS) == queries.GENERATION_TOKENS_TOTAL
    assert counter(inference_names.VLLM_NUM_PREEMPTIONS) == queries.NUM_PREEMPTIONS_TOTAL
    assert queries.NUM_REQUESTS_RUNNING == inference_names.VLLM_NUM_REQUESTS_RUNNING
    assert queries.NUM_REQUESTS_WAITING == inference_names.VLLM_NUM_REQUESTS_WAITING
    assert queries.KV_CACHE_USAGE == inference_names.VLLM_KV_CACHE_USAGE


def test_no_expression_names_a_metric_outside_the_constants() -> None:
    known = {queries.ITL_HISTOGRAM + "_bucket", queries.TTFT_HISTOGRAM + "_bucket",
             queries.ITL_HISTOGRAM + "_sum",
             queries.PROMPT_TOKENS_TOTAL, queries.GENERATION_TOKENS_TOTAL,
             queries.NUM_PREEMPTIONS_TOTAL, queries.NUM_REQUESTS_RUNNING,
             queries.NUM_REQUESTS_WAITING, queries.KV_CACHE_USAGE}
    for name, expr in QuerySet.default().expressions().items():
        used = {word for word in known if word in expr}
        assert used, f"{name}: {expr}"


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
    assert 'm_bucket{model="x",route="a\\"b\\\\c"}' in exprs["itl_tail_seconds"]
    assert "ttft_tail_seconds" not in exprs


def test_targets_are_the_scraped_instances_of_the_job() -> None:
    assert QuerySet.default().targets() == 'up{job="inference"}'
