"""Histograms observed on every request, as collectors of plain counts.

Each request that reached the engine observes a dozen values at once (every stage, the prompt's
bytes and tokens); prometheus_client's ``Histogram`` takes a lock per observation, which on this
path would cost more than the measuring itself. A :class:`CountedHistogram` keeps a row of bucket
counts and a sum per label set, updated on the event loop (the only writer), and renders its
family when scraped (``/metrics`` renders in a worker thread, so a scrape copies each row first:
it may miss an observation in flight, never count half of one in its buckets)::

    stages = CountedHistogram(REQUEST_STAGE, [[stage.value] for stage in Stage], registry)
    stages.observe_rows(record.seconds.values())     # one value per row, in order
    prompt = CountedHistogram(REQUEST_PROMPT_BYTES, [[]], registry)
    prompt.observe(0, 1234)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily

from governor.contracts.declaration import Metric
from governor.contracts.families import histogram_family
from governor.contracts.promql import exposition_float


class CountedHistogram:
    """``metric`` (a declared histogram) with one row per label set of ``rows``."""

    def __init__(self, metric: Metric, rows: Sequence[Sequence[str]],
                 registry: CollectorRegistry) -> None:
        histogram_family(metric)  # a histogram, or an error now rather than at the first scrape
        self._metric = metric
        self._edges = metric.buckets
        self._le = (*(exposition_float(edge) for edge in metric.buckets), "+Inf")
        self._labels = [list(values) for values in rows]
        self._counts = [[0] * len(self._le) for _ in rows]
        self._sums = [0.0] * len(rows)
        registry.register(self)

    def observe(self, row: int, value: float) -> None:
        self._counts[row][bisect_left(self._edges, value)] += 1
        self._sums[row] += value

    def observe_rows(self, values: Iterable[float]) -> None:
        """One value per row, in the rows' order."""
        counts, sums, edges = self._counts, self._sums, self._edges
        for row, value in enumerate(values):
            counts[row][bisect_left(edges, value)] += 1
            sums[row] += value

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = histogram_family(self._metric)
        for labels, row, total in zip(self._labels, self._counts, self._sums, strict=True):
            cumulative, buckets = 0, []
            for le, count in zip(self._le, list(row), strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric(labels, buckets, total)
        yield family
