"""Metric families built from a declaration, for collectors that render at scrape time.

A collector keeps plain numbers and builds fresh families in ``collect()``; these helpers give
each family the declared name, help and label names, and refuse a family of the wrong kind::

    >>> from governor.contracts.declaration import Metric
    >>> running = Metric("running", "gauge", "Requests running.", "requests", ("model",))
    >>> family = gauge_family(running)
    >>> family.add_metric(["m"], 2.0)
    >>> family.samples[0].labels
    {'model': 'm'}

Every family takes the values of all declared labels in order; an info family takes them the
same way, with an empty value (the exposed sample is the same).
"""

from __future__ import annotations

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric as Family

from governor.contracts.declaration import Metric
from governor.contracts.instruments import expect


def counter_family(metric: Metric) -> CounterMetricFamily:
    expect(metric, "counter")
    return CounterMetricFamily(metric.name, metric.help, labels=metric.labels)


def gauge_family(metric: Metric) -> GaugeMetricFamily:
    expect(metric, "gauge")
    return GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)


def histogram_family(metric: Metric) -> HistogramMetricFamily:
    expect(metric, "histogram")
    return HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)


def info_family(metric: Metric) -> InfoMetricFamily:
    expect(metric, "info")
    return InfoMetricFamily(metric.name, metric.help, labels=metric.labels)


def family(metric: Metric) -> Family:
    """The family of the declared kind (for code that handles every kind alike)."""
    build = {"counter": counter_family, "gauge": gauge_family,
             "histogram": histogram_family, "info": info_family}[metric.kind]
    return build(metric)


def add_value(family: Family, values: list[str], value: float) -> None:
    """One sample of a counter, gauge or info family (an info sample's value is 1)."""
    if isinstance(family, InfoMetricFamily):
        family.add_metric(values, {})
    elif isinstance(family, CounterMetricFamily | GaugeMetricFamily):
        family.add_metric(values, value)
    else:
        raise TypeError(f"{family.name}: a {family.type} takes buckets, not one value")
