"""A declaration names its exposed series, refuses what prometheus_client would rename, and
builds instruments and families that expose exactly what it declares."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric as Family
from prometheus_client.registry import Collector

from governor.contracts.declaration import Metric
from governor.contracts.families import add_value, family, gauge_family, histogram_family
from governor.contracts.instruments import counter, histogram, info
from governor.contracts.metrics import controller, gpu, service, slo, vllm

COUNTER = Metric("x_requests", "counter", "Requests.", "requests", ("code",))
HISTOGRAM = Metric("x_seconds", "histogram", "Latency.", "seconds", ("route",), (0.1, 1.0))
INFO = Metric("x_build", "info", "Build.", "", ("version",))


def test_each_kind_names_the_series_a_query_selects() -> None:
    assert (COUNTER.series, COUNTER.total) == ("x_requests_total", "x_requests_total")
    assert (HISTOGRAM.bucket, HISTOGRAM.sum, HISTOGRAM.count) == (
        "x_seconds_bucket", "x_seconds_sum", "x_seconds_count")
    assert INFO.series == "x_build_info"
    assert Metric("x_depth", "gauge", "Depth.").series == "x_depth"


@pytest.mark.parametrize("series", ["total", "series"])
def test_a_histogram_has_no_single_series(series: str) -> None:
    with pytest.raises(ValueError, match="histogram"):
        getattr(HISTOGRAM, series)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("x_total", "counter", "h"), "without _total"),
        (("x_info", "info", "h"), "without _info"),
        (("x", "summary", "h"), "kind must be one of"),
        (("x-y", "gauge", "h"), "not a metric name"),
        (("x", "gauge", "h", "", ("a", "a")), "repeated label"),
        (("x", "histogram", "h"), "buckets are declared for histograms"),
        (("x", "gauge", "h", "", (), (1.0,)), "buckets are declared for histograms"),
        (("x", "histogram", "h", "", (), (1.0, 0.5)), "buckets must increase"),
    ],
)
def test_what_the_client_would_rename_or_refuse_is_refused(fields: tuple[object, ...],
                                                           message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Metric(*fields)  # type: ignore[arg-type]


def test_an_instrument_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="declared a histogram, not a counter"):
        counter(HISTOGRAM, CollectorRegistry())


def test_instruments_expose_the_declared_name_help_labels_and_buckets() -> None:
    registry = CollectorRegistry()
    counter(COUNTER, registry).labels("200").inc()
    histogram(HISTOGRAM, registry).labels("/v1").observe(0.5)
    info(INFO, registry).info({"version": "1"})
    text = generate_latest(registry).decode()
    assert '# HELP x_requests_total Requests.\n# TYPE x_requests_total counter\n' in text
    assert 'x_requests_total{code="200"} 1.0' in text
    assert [line.split("{")[1].split(",")[0] for line in text.splitlines()
            if line.startswith("x_seconds_bucket")] == ['le="0.1"', 'le="1.0"', 'le="+Inf"']
    assert 'x_build_info{version="1"} 1.0' in text


def test_families_expose_the_same_samples_as_instruments() -> None:
    gauge = gauge_family(Metric("x_depth", "gauge", "Depth.", "", ("model",)))
    gauge.add_metric(["m"], 3.0)
    built = family(INFO)
    add_value(built, ["1"], 1.0)
    buckets = histogram_family(HISTOGRAM)
    buckets.add_metric(["/v1"], [("0.1", 0.0), ("1.0", 1.0), ("+Inf", 1.0)], 0.5)

    class Collected(Collector):
        def collect(self) -> Iterable[Family]:
            return [gauge, built, buckets]

    registry = CollectorRegistry()
    registry.register(Collected())
    text = generate_latest(registry).decode()
    assert 'x_depth{model="m"} 3.0' in text
    assert 'x_build_info{version="1"} 1.0' in text
    assert 'x_seconds_bucket{le="1.0",route="/v1"} 1.0' in text


def test_a_histogram_family_takes_no_single_value() -> None:
    with pytest.raises(TypeError, match="buckets"):
        add_value(histogram_family(HISTOGRAM), ["/v1"], 1.0)


def test_every_declared_name_is_unique_across_the_stack() -> None:
    names = [value.name for module in (service, vllm, gpu, controller, slo)
             for value in vars(module).values() if isinstance(value, Metric)]
    assert len(names) == len(set(names))


def test_a_gpu_ratio_is_declared_in_the_ratio_unit() -> None:
    """The GPM reader clamps ratios to 0-1 by the declared unit, so the two must agree."""
    for metric in (*gpu.HEALTH, *gpu.PER_GPU):
        assert (metric.unit == "ratio") == metric.name.endswith("_ratio"), metric.name
