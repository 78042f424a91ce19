"""prometheus_client instruments built from a declaration, registered where the caller says.

Name, help, label names and buckets come from the declaration, and asking for the wrong kind
fails at once, so a component cannot expose a declared counter as a gauge::

    >>> from prometheus_client import CollectorRegistry
    >>> from governor.contracts.declaration import Metric
    >>> depth = Metric("queue_depth", "gauge", "Requests waiting.", "requests")
    >>> gauge(depth, CollectorRegistry()).set(3)
    >>> counter(depth, CollectorRegistry())
    Traceback (most recent call last):
    ...
    ValueError: queue_depth is declared a gauge, not a counter
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from governor.contracts.declaration import Kind, Metric


def expect(metric: Metric, kind: Kind) -> Metric:
    """The declaration itself, once it is known to be of ``kind``."""
    if metric.kind != kind:
        raise ValueError(f"{metric.name} is declared a {metric.kind}, not a {kind}")
    return metric


def counter(metric: Metric, registry: CollectorRegistry) -> Counter:
    expect(metric, "counter")
    return Counter(metric.name, metric.help, metric.labels, registry=registry)


def gauge(metric: Metric, registry: CollectorRegistry) -> Gauge:
    expect(metric, "gauge")
    return Gauge(metric.name, metric.help, metric.labels, registry=registry)


def histogram(metric: Metric, registry: CollectorRegistry) -> Histogram:
    expect(metric, "histogram")
    return Histogram(metric.name, metric.help, metric.labels, buckets=metric.buckets,
                     registry=registry)


def info(metric: Metric, registry: CollectorRegistry) -> Info:
    """An info instrument; the declared labels are the keys its ``info()`` value carries."""
    expect(metric, "info")
    return Info(metric.name, metric.help, registry=registry)
