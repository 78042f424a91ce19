"""The counted families expose what prometheus_client's own instruments would."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from governor.contracts.instruments import counter, histogram
from governor.contracts.metrics.service import (
    EXEMPLAR_TRACE_ID,
    GENERATION_TOKENS,
    QUEUE_DEPTH,
    REQUEST_DURATION,
    REQUEST_PROMPT_BYTES,
    REQUEST_STAGE,
    REQUESTS,
    STAGE_BUCKETS,
    TIME_TO_FIRST_TOKEN,
)
from governor.contracts.stages import Stage
from governor.inference.telemetry.counted import CountedCounter, CountedHistogram
from governor.inference.telemetry.stages import RequestStages


def record(seconds: float) -> RequestStages:
    values = {stage: seconds * (index + 1) for index, stage in enumerate(Stage)}
    return RequestStages(MappingProxyType(values), sum(values.values()), True)


def samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every sample but prometheus_client's ``_created`` timestamps, in order."""
    return [(s.name, tuple(sorted(s.labels.items())), s.value)
            for family in registry.collect() for s in family.samples
            if not s.name.endswith("_created")]


def test_the_stage_rows_expose_what_prometheus_clients_histogram_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    stages = CountedHistogram(REQUEST_STAGE, ours, [[stage.value] for stage in Stage])
    reference = histogram(REQUEST_STAGE, theirs)
    # Edges exactly (le is inclusive), between edges, zero, and past the last edge.
    for seconds in (0.0, STAGE_BUCKETS[0], 0.00031, 0.02, 7.5, 100.0):
        stages.observe_rows(record(seconds).seconds.values())
        for stage, value in record(seconds).seconds.items():
            reference.labels(stage.value).observe(value)
    assert samples(ours) == samples(theirs)
    assert b'governor_request_stage_seconds_bucket{le="5e-05",stage="read"} 2.0' in \
        generate_latest(ours)  # 0 and the first edge itself


def test_rows_observed_in_two_parts_expose_what_one_observation_would() -> None:
    """A request's stages before its first token observed at it, the rest at its end."""
    whole, parts = CollectorRegistry(), CollectorRegistry()
    at_once = CountedHistogram(REQUEST_STAGE, whole, [[stage.value] for stage in Stage])
    split = CountedHistogram(REQUEST_STAGE, parts, [[stage.value] for stage in Stage])
    for seconds in (0.0, 0.00031, 7.5):
        values = tuple(record(seconds).seconds.values())
        at_once.observe_rows(values)
        split.observe_rows(values[:8])
        split.observe_rows(values[8:], first=8)
    assert samples(parts) == samples(whole)
    split.observe_rows((0.02,), first=len(Stage) - 1)  # the last row alone
    other = Stage.OTHER.value
    assert [value for name, labels, value in samples(parts)
            if name.endswith("_count") and labels == (("stage", other),)] == [4.0]
    assert [value for name, labels, value in samples(parts)
            if name.endswith("_count") and labels == (("stage", "read"),)] == [3.0]


def test_a_histogram_without_labels_is_one_row() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counted = CountedHistogram(REQUEST_PROMPT_BYTES, ours).labels()
    reference = histogram(REQUEST_PROMPT_BYTES, theirs)
    for size in (10, 64, 65, 5_000_000):
        counted.observe(size)
        reference.observe(size)
    assert samples(ours) == samples(theirs)


def test_labelled_histograms_made_on_first_use_match_in_any_order() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counted = CountedHistogram(REQUEST_DURATION, ours)
    reference = histogram(REQUEST_DURATION, theirs)
    observations = [(("/v1/completions", "chat"), 0.3), (("/v1/chat/completions", "doc"), 7.5),
                    (("/v1/completions", "chat"), 500.0), (("/v1/completions", "doc"), 0.05)]
    for labels, value in observations:
        counted.labels(*labels).observe(value)
        reference.labels(*labels).observe(value)
    assert sorted(samples(ours)) == sorted(samples(theirs))
    with pytest.raises(ValueError, match="takes 2 label values"):
        counted.labels("/v1/completions")


def test_each_bucket_keeps_its_last_exemplar_in_openmetrics() -> None:
    registry = CollectorRegistry()
    ttft = CountedHistogram(TIME_TO_FIRST_TOKEN, registry).labels("llama", "chat")
    first, last = "a" * 32, "b" * 32
    ttft.observe(0.03, {EXEMPLAR_TRACE_ID: first})
    ttft.observe(0.04, {EXEMPLAR_TRACE_ID: last})  # the same bucket (0.03, 0.05]
    ttft.observe(3.0)  # no exemplar: its bucket has none
    text = openmetrics_latest(registry).decode()  # type: ignore[no-untyped-call]
    families = list(text_string_to_metric_families(text))  # type: ignore[no-untyped-call]
    exemplars = {sample.labels["le"]: sample.exemplar for sample in families[0].samples
                 if sample.name.endswith("_bucket") and sample.exemplar is not None}
    assert list(exemplars) == ["0.05"]
    assert exemplars["0.05"].labels == {EXEMPLAR_TRACE_ID: last}
    assert exemplars["0.05"].value == 0.04


def test_counters_match_prometheus_clients() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    for metric, make in ((REQUESTS, counter), (GENERATION_TOKENS, counter)):
        counted, reference = CountedCounter(metric, ours), make(metric, theirs)
        values = [f"v{index}" for index in range(len(metric.labels))]
        for amount in (1, 3, 0.5):
            counted.labels(*values).inc(amount)
            reference.labels(*values).inc(amount)
        with pytest.raises(ValueError, match="only goes up"):
            counted.labels(*values).inc(-1)
    assert samples(ours) == samples(theirs)


def test_a_family_of_another_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="not a counter"):
        CountedCounter(QUEUE_DEPTH, CollectorRegistry())
    with pytest.raises(ValueError, match="not a histogram"):
        CountedHistogram(REQUESTS, CollectorRegistry())
