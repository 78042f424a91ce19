"""The counted histograms expose what prometheus_client's own Histogram would."""

from __future__ import annotations

from types import MappingProxyType

from prometheus_client import CollectorRegistry, generate_latest

from governor.contracts.instruments import histogram
from governor.contracts.metrics.service import REQUEST_PROMPT_BYTES, REQUEST_STAGE, STAGE_BUCKETS
from governor.contracts.stages import Stage
from governor.inference.counted import CountedHistogram
from governor.inference.stages import RequestStages


def record(seconds: float) -> RequestStages:
    values = {stage: seconds * (index + 1) for index, stage in enumerate(Stage)}
    return RequestStages(MappingProxyType(values), sum(values.values()), True)


def test_the_exposition_is_prometheus_clients_own_for_the_same_observations() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    stages = CountedHistogram(REQUEST_STAGE, [[stage.value] for stage in Stage], ours)
    reference = histogram(REQUEST_STAGE, theirs)
    # Edges exactly (le is inclusive), between edges, zero, and past the last edge.
    for seconds in (0.0, STAGE_BUCKETS[0], 0.00031, 0.02, 7.5, 100.0):
        stages.observe_rows(record(seconds).seconds.values())
        for stage, value in record(seconds).seconds.items():
            reference.labels(stage.value).observe(value)
    assert samples(ours) == samples(theirs)
    assert b'governor_request_stage_seconds_bucket{le="5e-05",stage="read"} 2.0' in \
        generate_latest(ours)  # 0 and the first edge itself


def samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every sample but prometheus_client's ``_created`` timestamps, in order."""
    return [(s.name, tuple(sorted(s.labels.items())), s.value)
            for family in registry.collect() for s in family.samples
            if not s.name.endswith("_created")]


def test_a_histogram_without_labels_is_one_row() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counted = CountedHistogram(REQUEST_PROMPT_BYTES, [[]], ours)
    reference = histogram(REQUEST_PROMPT_BYTES, theirs)
    for size in (10, 64, 65, 5_000_000):
        counted.observe(0, size)
        reference.observe(size)
    assert samples(ours) == samples(theirs)
