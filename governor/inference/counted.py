"""Histograms observed on every request, as collectors of plain counts.

Each request that reached the engine observes a dozen values at once (every stage, the prompt's
bytes and tokens); prometheus_client's ``Histogram`` takes a lock per observation, which on this
path would cost more than the measuring itself. A :class:`CountedHistogram` keeps the bucket
counts of every label set in one :class:`~collections.Counter` (row by row, ``row * buckets +
bucket``) and a sum per label set, updated on the event loop (the only writer): a request's row
of values is placed in its buckets and counted by builtins (``map``, ``bisect_left``,
``Counter.update``), no Python loop per value. The family is rendered when scraped (``/metrics``
renders in a worker thread, so a scrape copies the counts first: it may miss an observation in
flight, never count half of one in a row's buckets)::

    stages = CountedHistogram(REQUEST_STAGE, [[stage.value] for stage in Stage], registry)
    stages.observe_rows(record.seconds.values())     # one value per row, in order
    prompt = CountedHistogram(REQUEST_PROMPT_BYTES, [[]], registry)
    prompt.observe(0, 1234)
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from itertools import repeat
from operator import add

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
        width = len(self._le)
        self._offsets = tuple(range(0, width * len(rows), width))  # each row's first bucket
        self._counts: Counter[int] = Counter()
        self._sums = [0.0] * len(rows)
        registry.register(self)

    def observe(self, row: int, value: float) -> None:
        self._counts[self._offsets[row] + bisect_left(self._edges, value)] += 1
        self._sums[row] += value

    def observe_rows(self, values: Collection[float]) -> None:
        """One value per row, in the rows' order (read twice: a collection, not an iterator)."""
        self._counts.update(map(add, self._offsets, map(bisect_left, repeat(self._edges), values)))
        self._sums = list(map(add, self._sums, values))

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = histogram_family(self._metric)
        counts = dict(self._counts)
        for labels, offset, total in zip(self._labels, self._offsets, self._sums, strict=True):
            cumulative, buckets = 0, []
            for bucket, le in enumerate(self._le):
                cumulative += counts.get(offset + bucket, 0)
                buckets.append((le, float(cumulative)))
            family.add_metric(labels, buckets, total)
        yield family
