"""The benchmark's model of Prometheus, Alertmanager and the generated stack's timing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from governor.bench.controller.monitoring import (
    AlertState,
    Pipeline,
    Scrapes,
    cumulative_counts,
    histogram_quantile,
)
from governor.bench.controller.pipeline import DeployError, pipeline_from_deploy
from governor.contracts.metrics import service

REPO = Path(__file__).resolve().parents[3]
EDGES = (0.01, 0.05, 0.1, 0.12, 0.2)


@pytest.mark.parametrize(
    ("q", "counts", "expected"),
    [
        (0.5, [0, 100, 100, 100, 100, 100], 0.03),  # all in (0.01, 0.05]: interpolate to the middle
        (0.99, [50, 100, 100, 100, 100, 100], 0.0492),  # 0.01 + 0.04 * 49/50
        (0.99, [0, 0, 0, 0, 0, 10], 0.2),  # in +Inf: the highest finite edge
        (0.5, [10, 10, 10, 10, 10, 10], 0.005),  # the first bucket starts at 0
        (0.99, [0, 0, 0, 0, 0, 0], math.nan),
    ],
    ids=["middle of a bucket", "upper part of a bucket", "+Inf bucket", "first bucket",
         "no observations"],
)
def test_histogram_quantile_interpolates_as_prometheus_does(
    q: float, counts: list[float], expected: float
) -> None:
    got = histogram_quantile(q, EDGES, np.asarray(counts, dtype=float))
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected)


def test_cumulative_counts_follow_le_semantics() -> None:
    # 0.05 is counted in le="0.05"; 0.3 only in +Inf.
    counts = cumulative_counts(np.asarray([0.005, 0.05, 0.06, 0.3]), EDGES)
    assert counts.tolist() == [1, 2, 3, 3, 3, 4]


def scrapes_with(spikes_from: float) -> Scrapes:
    """Every 15 s, 1000 fast samples plus 30 spikes of 0.2 s once ``spikes_from`` has passed."""
    s = Scrapes(EDGES, EDGES)
    total = np.zeros(len(EDGES) + 1)
    for k in range(1, 41):
        at = 15.0 * k
        values = [0.008] * 1000 + ([0.2] * 30 if at > spikes_from else [])
        total += np.diff(cumulative_counts(np.asarray(values), EDGES), prepend=0.0)
        cumulative = np.cumsum(total)  # what the client library exposes per le
        s.add(at, cumulative, cumulative, {"c": 100.0 * at}, {"g": float(k)})
    return s


def test_a_window_sees_only_the_scrapes_inside_it() -> None:
    s = scrapes_with(spikes_from=300.0)
    assert s.quantile(0.99, "itl", 300.0, 60.0) < 0.01  # no spike scraped yet
    # One scrape of spikes among four in the window is 0.7% of samples: not yet the P99.
    assert s.quantile(0.99, "itl", 315.0, 60.0) < 0.01
    assert s.quantile(0.99, "itl", 330.0, 60.0) > 0.12
    assert math.isnan(s.quantile(0.99, "itl", 20.0, 10.0))  # fewer than two scrapes
    assert s.rate("c", 300.0, 60.0) == pytest.approx(100.0)
    assert s.gauge("g", 299.0) == 19.0
    assert s.deriv("g", 300.0, 60.0) == pytest.approx(1 / 15)


def test_the_fast_alert_waits_for_its_for_and_group_wait_and_records_the_episode() -> None:
    s = scrapes_with(spikes_from=300.0)
    alert = AlertState(Pipeline(alert_for_seconds=60.0, group_wait_seconds=10.0), 0.12, 0.99)
    deliveries = [d for t in range(30, 601, 30) if (d := alert.evaluate(s, float(t)))]
    assert alert.episodes == [(330.0, None)]  # true from the first evaluation that sees spikes
    assert deliveries == [390.0 + 10.0]  # firing 60 s later, delivered after group_wait


def test_the_pipeline_is_read_from_the_generated_stack() -> None:
    p = pipeline_from_deploy(REPO / "deploy", "InterTokenLatencyP99High", resync_seconds=10.0)
    assert (p.scrape_interval_seconds, p.evaluation_interval_seconds) == (15.0, 30.0)
    assert (p.alert_window_seconds, p.alert_for_seconds, p.group_wait_seconds) == (60.0, 60.0,
                                                                                   10.0)


def test_a_missing_stack_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="governor generate"):
        pipeline_from_deploy(tmp_path, "InterTokenLatencyP99High", resync_seconds=10.0)


def test_good_event_rates_count_the_bucket_at_the_threshold() -> None:
    s = scrapes_with(spikes_from=300.0)
    # 1000 fast samples per 15 s scrape are at or under 0.12; the 30 spikes of 0.2 are not.
    assert s.bucket_rate("itl", 0.12, 600.0, 30.0) == pytest.approx(1000 / 15)
    assert s.bucket_rate("itl", math.inf, 600.0, 30.0) == pytest.approx(1030 / 15)
    assert math.isnan(s.bucket_rate("itl", 0.11, 600.0, 30.0))  # no such edge: no series


def test_the_benchmark_observes_every_quantity_the_controller_queries() -> None:
    from governor.bench.controller import build_parser, build_scenario
    from governor.bench.controller.loop import observe
    from governor.controller.slo import objectives
    from governor.slo.spec import load_spec

    args = build_parser().parse_args(["--slo", str(REPO / "slo.yaml"),
                                      "--deploy", str(REPO / "deploy")])
    scenario = build_scenario(args)
    s = Scrapes(service.INTER_TOKEN_LATENCY.buckets, service.TIME_TO_FIRST_TOKEN.buckets)
    itl = np.zeros(len(service.INTER_TOKEN_LATENCY.buckets) + 1)
    ttft = np.zeros(len(service.TIME_TO_FIRST_TOKEN.buckets) + 1)
    for k in range(1, 30):
        itl += np.diff(cumulative_counts(np.asarray([0.01] * 99 + [0.2]),
                                         service.INTER_TOKEN_LATENCY.buckets), prepend=0.0)
        ttft += np.diff(cumulative_counts(np.asarray([0.3] * 9 + [2.0]),
                                          service.TIME_TO_FIRST_TOKEN.buckets), prepend=0.0)
        s.add(15.0 * k, np.cumsum(itl), np.cumsum(ttft),
              dict.fromkeys(("prompt_tokens", "generation_tokens", "preemptions", "itl_sum",
                             "itl_count", "refused"), 10.0 * k),
              {"running": 5.0, "waiting": float(k), "kv": 0.5, "slack": 1.0})
    obs = observe(scenario, s, 15.0 * 29)
    queried = set(objectives(load_spec(REPO / "slo.yaml")).queries.expressions())
    # The verdict rules' own output is not simulated: the benchmark's law acts as it does where
    # the rules are not loaded (it never waits a pass for their verdict).
    # Nor is vLLM's own max_num_queued_tokens: the simulated engine has no such bound, so the
    # benchmark's law never moves it (docs/overload.md says so).
    # Nor are the engine's own gaps (vLLM's histogram): the benchmark's clients read every token
    # at once, so the engine's gaps are the service's, and over the SLO wherever those are; the
    # stage guard would never hold for them, as it does not without them.
    unsimulated = {"itl_verdict_burn", "vllm_max_num_queued_tokens", "itl_engine_tail_seconds",
                   "itl_engine_spike_seconds"}
    assert unsimulated <= queried
    queried -= unsimulated
    assert {name for name, value in obs.as_inputs().items() if value is not None} == queried
    assert obs.ttft_per_second == pytest.approx(10 / 15)
    assert obs.ttft_good_per_second == pytest.approx(9 / 15)
    assert obs.itl_good_ratio == pytest.approx(0.99)


HISTOGRAM_SPECS = REPO / "lab" / "workloads" / "histograms"


@pytest.mark.parametrize(
    ("spec", "itl_metric", "itl_edges"),
    [("service.yaml", "governor_inter_token_latency_seconds",
      (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.09, 0.1, 0.12, 0.15, 0.2,
       0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)),
     ("vllm.yaml", "vllm:inter_token_latency_seconds",
      (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0)),
     ("vllm-custom.yaml", "vllm:inter_token_latency_seconds",
      (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5,
       0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0))],
    ids=["the service's own histogram", "vLLM's default buckets", "vLLM's custom buckets"],
)
def test_the_benchmarks_prometheus_stores_the_edges_the_slis_server_exposes(
        spec: str, itl_metric: str, itl_edges: tuple[float, ...]) -> None:
    from governor.bench.controller import build_parser, build_scenario

    args = build_parser().parse_args(["--slo", str(HISTOGRAM_SPECS / spec),
                                      "--deploy", str(REPO / "deploy")])
    scenario = build_scenario(args)
    assert (scenario.itl_histogram.metric, scenario.itl_histogram.edges) == (itl_metric,
                                                                             itl_edges)
    assert scenario.ttft_histogram.metric.endswith("time_to_first_token_seconds")
    # The three specs differ in the histogram only: the same thresholds for the law.
    assert (scenario.slo.itl_seconds, scenario.slo.ttft_seconds) == (0.1, 1.0)


def test_coarser_edges_change_the_tails_the_controller_reads() -> None:
    """Gaps of 30 ms and a 1.1% tail of 110 ms, seen through each histogram's edges: the median
    and the P99 come out where Prometheus would interpolate them."""
    from governor.contracts.metrics import vllm

    gaps = np.asarray([0.03] * 989 + [0.11] * 11)
    fine, coarse = service.INTER_TOKEN_LATENCY.buckets, vllm.ITL_BUCKETS

    def tails(edges: tuple[float, ...]) -> tuple[float, float]:
        counts = cumulative_counts(gaps, edges)
        return histogram_quantile(0.5, edges, counts), histogram_quantile(0.99, edges, counts)

    assert tails(fine) == pytest.approx((0.025 + 0.005 * 500 / 989,
                                         0.1 + 0.02 * (990 - 989) / 11))
    assert tails(coarse) == pytest.approx((0.025 + 0.025 * 500 / 989,
                                           0.1 + 0.05 * (990 - 989) / 11))
    # Both say the P99 breaches 100 ms: at an edge, which side of it is exact on any buckets.
    assert min(tails(fine)[1], tails(coarse)[1]) > 0.1


def test_prometheus_has_scraped_the_idle_engine_before_the_first_request() -> None:
    """The stack runs before the load arrives: the first scrape under load already gives a
    rate, so the first controller query after it reads the engine (15 s scrapes, queries every
    10 s: at 20 s, not 30 s)."""
    from dataclasses import replace

    from governor.bench.controller import build_parser, build_scenario
    from governor.bench.controller.loop import ceiling, run
    from governor.bench.controller.workload import parse_workload

    args = build_parser().parse_args(["--slo", str(REPO / "slo.yaml"),
                                      "--deploy", str(REPO / "deploy")])
    chats = parse_workload({
        "version": "governor/workload/v1", "name": "chats", "duration": "1m",
        "classes": {"chat": {"prompt_tokens": [200, 400], "output_tokens": [50, 100],
                             "rate": [{"start": "0%", "end": "100%", "from": 2.0}]}}})
    scenario = replace(build_scenario(args), workload=chats)
    result = run(scenario, chats.arrivals(1), name="default", static=ceiling(scenario))
    p = scenario.pipeline
    first = next(at for at, tail in result.observed if not math.isnan(tail))
    assert first == math.ceil(p.scrape_interval_seconds / p.resync_seconds) * p.resync_seconds
    assert first < 2 * p.scrape_interval_seconds
