"""The controller's PromQL: the SLO's quantile and windows, escaped selectors, its targets."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from governor.alerts.render import RULES_DIR, render_all
from governor.contracts.metrics import verdict
from governor.controller.queries import HistogramSli, QuerySet
from governor.controller.slo import objectives
from governor.generation.params import Endpoints, RenderParams
from governor.slo.fleet import Target
from governor.slo.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


def test_the_tails_use_the_slo_quantile_and_both_windows() -> None:
    exprs = QuerySet(HistogramSli("m_itl"), 0.995, HistogramSli("m_ttft"), 0.9,
                     short_window_seconds=20, long_window_seconds=600).expressions()
    assert exprs["itl_tail_seconds"] == (
        "histogram_quantile(0.995, sum by (instance, engine, le) "
        '(rate(m_itl_bucket{job="inference"}[20s])))')
    assert "[600s]" in exprs["itl_tail_long_seconds"]
    assert exprs["itl_median_seconds"].startswith("histogram_quantile(0.5,")
    assert exprs["ttft_tail_seconds"].startswith("histogram_quantile(0.9,")


def test_selectors_are_escaped_and_a_missing_ttft_slo_drops_its_query() -> None:
    hostile = HistogramSli("m", {"route": 'a"b\\c', "model": "x"})
    exprs = QuerySet(hostile, 0.99, None, 0.99).expressions()
    assert 'm_bucket{job="inference", model="x", route="a\\"b\\\\c"}' in exprs["itl_tail_seconds"]
    assert "ttft_tail_seconds" not in exprs


def test_targets_are_the_scraped_instances_of_the_job() -> None:
    assert QuerySet.default().targets() == 'up{job="inference"}'


def test_good_event_rates_read_the_buckets_at_the_slo_thresholds() -> None:
    exprs = QuerySet(HistogramSli("m_itl", {"model": "x"}, 0.12), 0.99,
                     HistogramSli("m_ttft", {}, 1.0), 0.99).expressions()
    # 1 s as prometheus_client writes it (1.0) or as Prometheus 3 stores it (1).
    assert exprs["ttft_good_per_second"] == (
        'sum by (instance, engine) (rate(m_ttft_bucket{job="inference", le=~"1|1\\\\.0"}[30s]))')
    assert exprs["ttft_per_second"] == \
        'sum by (instance, engine) (rate(m_ttft_count{job="inference"}[30s]))'
    assert exprs["itl_good_ratio"] == (
        'sum by (instance, engine) (rate(m_itl_bucket{job="inference", model="x", le="0.12"}'
        '[30s]))\n/\nsum by (instance, engine) (rate(m_itl_count{job="inference", model="x"}'
        '[30s]))')
    # Without thresholds (a QuerySet built by hand) there is nothing to count good events by.
    plain = QuerySet(HistogramSli("m_itl"), 0.99, HistogramSli("m_ttft"), 0.99).expressions()
    assert "itl_good_ratio" not in plain and "ttft_good_per_second" not in plain


def test_every_query_reads_the_specs_inference_target_only() -> None:
    """A fleet's job and namespace reach every expression, the engine's series included."""
    fleet = Target("vllm", {"namespace": "llm"})
    queries = QuerySet(HistogramSli("m_itl", {}, 0.12), 0.99, HistogramSli("m_ttft", {}, 1.0),
                       0.99, target=fleet)
    for name, expr in queries.expressions().items():
        selectors = re.findall(r"[a-z_:]+\{[^}]*\}|[a-z_:]+\[", expr)
        assert selectors, name
        assert all('job="vllm", namespace="llm"' in s for s in selectors), (name, expr)
    assert queries.targets() == 'up{job="vllm", namespace="llm"}'


def test_with_request_classes_the_latency_queries_read_the_classes_at_the_slos_threshold(
) -> None:
    spec = load_spec(ROOT / "slo.yaml")  # documents have thresholds of their own
    queries = objectives(spec).queries
    exprs = queries.expressions()
    for name in ("itl_tail_seconds", "itl_good_ratio", "ttft_tail_seconds", "ttft_per_second",
                 "ttft_good_per_second"):
        assert 'class!~"doc"' in exprs[name], name
    assert "class" not in exprs["prompt_tokens_per_second"]  # the engine's: every class


def test_the_stage_medians_are_per_instance_and_stage_over_both_windows_of_the_target() -> None:
    queries = QuerySet(HistogramSli("m_itl"), 0.99, None, 0.99,
                       target=Target("vllm", {"namespace": "llm"}))
    stages = queries.stage_expressions()
    assert stages["stage_seconds"] == (
        'histogram_quantile(0.5, sum by (instance, stage, le) '
        '(rate(governor_request_stage_seconds_bucket{job="vllm", namespace="llm"}[30s])))')
    assert "[300s]" in stages["stage_seconds_long"]


def test_the_engines_tails_are_read_where_a_client_can_stretch_the_slis_clock() -> None:
    """The engine's stages before the first token with a TTFT SLO, at a third of its allowance
    each; the engine's own gaps where the ITL SLI is not already that histogram."""
    service = QuerySet(HistogramSli("governor_inter_token_latency_seconds"), 0.99,
                       HistogramSli("governor_time_to_first_token_seconds"), 0.99)
    tail = service.stage_expressions()["stage_tail_seconds"]
    assert tail.startswith(
        "histogram_quantile(1, sum by (le, instance, stage) (rate(governor_request_stage_seconds"
        '_bucket{job="inference", stage=~"admission|engine_queue|prefill"}[30s]))\n'
        ">= bool on (instance, stage) group_left\n0.9966666666666667 * sum by (instance, stage)")
    assert tail.endswith("> 0)")
    exprs = service.expressions()
    assert exprs["itl_engine_tail_seconds"].startswith(
        "max by (instance) (histogram_quantile(1, sum by (le, instance, engine) "
        '(rate(vllm:inter_token_latency_seconds_bucket{job="inference"}[30s]))')
    assert "[300s]" in exprs["itl_engine_spike_seconds"]
    assert "0.999 * sum by (instance, engine)" in exprs["itl_engine_spike_seconds"]
    # No TTFT SLO: no tail of its stages. The SLI on vLLM's own gaps: nothing else to ask.
    stock = QuerySet(HistogramSli("vllm:inter_token_latency_seconds"), 0.99, None, 0.99)
    assert "stage_tail_seconds" not in stock.stage_expressions()
    assert not {"itl_engine_tail_seconds", "itl_engine_spike_seconds"} & set(stock.expressions())


def test_the_verdict_is_read_for_the_decode_and_ttft_slos_of_the_spec() -> None:
    queries = objectives(load_spec(ROOT / "slo.yaml")).queries
    assert queries.verdict_expressions() == {
        # Each cause at its largest over the short window: one evaluation's unknown between
        # two that name a cause does not hide it.
        "itl_causes": 'max_over_time(verdict:cause:share{slo="inter-token-latency", '
                      'service="inference"}[30s])',
        "ttft_causes": 'max_over_time(verdict:cause:share{slo="time-to-first-token", '
                       'service="inference"}[30s])',
        "gpu_conditions": 'verdict:slowdown:ratio or label_replace(verdict:fault:count, '
                          '"cause", "gpu_fault", "", "")',
    }
    assert QuerySet.default().verdict_expressions() == {}  # no spec: no verdict to read


def test_the_rules_burn_ratio_is_read_as_the_rules_record_it() -> None:
    """The law waits on a new breach only where the rules judge the target: their burn ratio of
    the decode SLO, selected by the labels the generated rule writes."""
    spec = load_spec(ROOT / "slo.yaml")
    queries = objectives(spec).queries
    expr = queries.expressions()["itl_verdict_burn"]
    assert expr == 'verdict:burn:ratio{slo="inter-token-latency", service="inference"}'
    rendered = render_all(spec, Endpoints.local(), RenderParams())
    rules = [rule for group in yaml.safe_load(rendered[f"{RULES_DIR}/verdict.yml"])["groups"]
             for rule in group["rules"] if rule.get("record") == verdict.BURN.name]
    assert any(rule["labels"].get("slo") == "inter-token-latency"
               and rule["labels"].get("service") == "inference" for rule in rules)
    assert "itl_verdict_burn" not in QuerySet.default().expressions()  # no spec: no rules
