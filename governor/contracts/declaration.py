"""The declaration of one metric, and the names of the series it is exposed as.

A declaration holds what prometheus_client is told (name, type, help, label names, buckets) and
what a query needs (the exposed series), so the component that exposes a metric and the rule,
board or query that reads it take both from the same object::

    >>> requests = Metric("governor_requests", "counter", "Finished requests.", "requests",
    ...                   ("route", "code"))
    >>> requests.total
    'governor_requests_total'
    >>> latency = Metric("x_seconds", "histogram", "Latency.", "seconds", buckets=(0.1, 1.0))
    >>> latency.bucket, latency.sum, latency.count
    ('x_seconds_bucket', 'x_seconds_sum', 'x_seconds_count')
    >>> latency.total
    Traceback (most recent call last):
    ...
    ValueError: x_seconds is a histogram: only a counter has a _total series

``unit`` documents the base unit the name ends in; it is never passed to prometheus_client,
which would add a ``# UNIT`` line to the OpenMetrics exposition that scrapers do not expect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram", "info"]
KINDS: tuple[Kind, ...] = ("counter", "gauge", "histogram", "info")

# Classic names: vLLM's colons included, as Prometheus (not OpenMetrics' strict form) reads them.
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric as declared to prometheus_client (counters without ``_total``, info metrics
    without ``_info``: the client appends them to the exposed series).

    ``labels`` are every label of the exposed series in the order values are given; for an info
    metric they include the keys of its value.
    """

    name: str
    kind: Kind
    help: str
    unit: str = ""
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # histograms only; +Inf is implied

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"not a metric name: {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind must be one of {KINDS}, not {self.kind!r}")
        suffix = {"counter": "_total", "info": "_info"}.get(self.kind)
        if suffix and self.name.endswith(suffix):
            raise ValueError(f"{self.name}: declare a {self.kind} without {suffix}; "
                             "the client appends it to the exposed series")
        bad = [label for label in self.labels if not _LABEL.fullmatch(label)]
        if bad or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"{self.name}: bad or repeated label names {self.labels}")
        if (self.kind == "histogram") != bool(self.buckets):
            raise ValueError(f"{self.name}: buckets are declared for histograms, and only them")
        if list(self.buckets) != sorted(set(self.buckets)):
            raise ValueError(f"{self.name}: buckets must increase")

    @property
    def series(self) -> str:
        """The sample a selector names: ``_total`` of a counter, ``_info`` of an info metric,
        the name itself for a gauge (a histogram has three: :attr:`bucket`, :attr:`sum`,
        :attr:`count`)."""
        if self.kind == "histogram":
            raise ValueError(f"{self.name} is a histogram: select its bucket, sum or count")
        return {"counter": f"{self.name}_total", "info": f"{self.name}_info"}.get(
            self.kind, self.name)

    @property
    def total(self) -> str:
        return self._suffixed("counter", "_total")

    @property
    def bucket(self) -> str:
        return self._suffixed("histogram", "_bucket")

    @property
    def sum(self) -> str:
        return self._suffixed("histogram", "_sum")

    @property
    def count(self) -> str:
        return self._suffixed("histogram", "_count")

    def _suffixed(self, kind: Kind, suffix: str) -> str:
        if self.kind != kind:
            raise ValueError(f"{self.name} is a {self.kind}: only a {kind} has a {suffix} series")
        return self.name + suffix
