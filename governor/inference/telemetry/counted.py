"""The service's per-request and per-token series, as collectors of plain counts.

Every request observes its latencies, a dozen stage values and its prompt's sizes, and counts
itself; every streamed token observes its inter-token latency and counts itself.
prometheus_client's instruments take a lock per observation, walk a histogram's edges in Python
and validate each exemplar again, which on this path costs more than the measuring itself. The
families here keep plain numbers instead, updated on the event loop (the service's only writer
of these series): a histogram's bucket counts in one :class:`~collections.Counter` (row by row,
``row * buckets + bucket``) and a sum per label set, a counter's value in its child.
A child is made once per label set and kept, so an observation is a bisection and two additions.
The families are rendered when scraped (``/metrics`` renders in a worker thread, so a scrape
copies the counts first: it may miss an observation in flight, never count half of one)::

    ttft = CountedHistogram(TIME_TO_FIRST_TOKEN, registry)
    ttft.labels("llama", "chat").observe(0.4, {"trace_id": "4bf9…"})   # the last exemplar kept
    stages = CountedHistogram(REQUEST_STAGE, registry, [[stage.value] for stage in Stage])
    stages.observe_rows(record.seconds.values())     # one value per row, in order
    stages.observe_rows(rest, first=8)               # one value per row from row 8 on
    requests = CountedCounter(REQUESTS, registry)
    requests.labels("/v1/completions", "200", "chat").inc()

What they expose is what prometheus_client's own instruments would for the same observations,
``_created`` samples aside (tests/inference/telemetry/test_counted.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from itertools import repeat
from operator import add
from time import time
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Exemplar

from governor.contracts.declaration import Metric
from governor.contracts.families import counter_family, histogram_family
from governor.contracts.promql import exposition_float

Child = TypeVar("Child")


class _Family(Generic[Child]):
    """A declared family's children, one per label set, made on first use (by ``make``, given
    the child's row) and kept."""

    def __init__(self, metric: Metric, make: Callable[[int], Child]) -> None:
        self._metric = metric
        self._make = make
        self._children: dict[tuple[str, ...], Child] = {}
        self._labels: list[list[str]] = []  # each child's label values, in the order made

    def labels(self, *values: str) -> Child:
        """The child of these label values (all of the declared labels, in order)."""
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self._metric.labels):
                raise ValueError(f"{self._metric.name} takes {len(self._metric.labels)} label "
                                 f"values ({', '.join(self._metric.labels)}), not "
                                 f"{len(values)}")
            self._labels.append([str(value) for value in values])
            child = self._children[values] = self._make(len(self._labels) - 1)
        return child


class Value:
    """A counter's value for one label set."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.value += amount


class CountedCounter(_Family[Value]):
    """``metric`` (a declared counter); ``labels(...)`` gives its :class:`Value`."""

    def __init__(self, metric: Metric, registry: CollectorRegistry) -> None:
        super().__init__(metric, lambda row: Value())
        counter_family(metric)  # a counter, or an error now rather than at the first scrape
        registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = counter_family(self._metric)
        for labels, child in zip(list(self._labels), list(self._children.values()),
                                 strict=False):
            family.add_metric(labels, child.value)
        yield family


class HistogramChild:
    """One label set's row of a :class:`CountedHistogram`."""

    __slots__ = ("_counts", "_edges", "_exemplars", "_offset", "_row", "_sums")

    def __init__(self, histogram: CountedHistogram, row: int) -> None:
        self._counts = histogram._counts
        self._sums = histogram._sums
        self._exemplars = histogram._exemplars
        self._edges = histogram._edges
        self._row = row
        self._offset = row * len(histogram._le)

    def observe(self, value: float, exemplar: Mapping[str, str] | None = None) -> None:
        """Count ``value`` in its bucket (an edge is inclusive); ``exemplar``'s labels (a
        trace id) become its bucket's exemplar, as the last observation's."""
        bucket = self._offset + bisect_left(self._edges, value)
        self._counts[bucket] += 1
        self._sums[self._row] += value
        if exemplar is not None:
            self._exemplars[bucket] = (exemplar, value, time())


class CountedHistogram(_Family[HistogramChild]):
    """``metric`` (a declared histogram); ``rows``: label sets made up front, in order (their
    series exist before their first observation, and :meth:`observe_rows` fills them)."""

    def __init__(self, metric: Metric, registry: CollectorRegistry,
                 rows: Sequence[Sequence[str]] = ()) -> None:
        super().__init__(metric, self._row)
        histogram_family(metric)  # a histogram, or an error now rather than at the first scrape
        self._edges = metric.buckets
        self._le = (*(exposition_float(edge) for edge in metric.buckets), "+Inf")
        self._counts: Counter[int] = Counter()
        self._sums: list[float] = []
        self._exemplars: dict[int, tuple[Mapping[str, str], float, float]] = {}
        for values in rows:
            self.labels(*values)
        self._offsets = tuple(range(0, len(self._le) * len(rows), len(self._le)))
        registry.register(self)

    def _row(self, row: int) -> HistogramChild:
        self._sums.append(0.0)
        return HistogramChild(self, row)

    def observe_rows(self, values: Collection[float], first: int = 0) -> None:
        """One value per row made up front, in their order from row ``first`` (read twice: a
        collection, not an iterator); placed and counted by builtins, no Python loop per
        value."""
        offsets = self._offsets[first:] if first else self._offsets
        self._counts.update(map(add, offsets, map(bisect_left, repeat(self._edges), values)))
        end = first + len(values)
        self._sums[first:end] = map(add, self._sums[first:end], values)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = histogram_family(self._metric)
        counts, exemplars = dict(self._counts), dict(self._exemplars)
        sums, width = list(self._sums), len(self._le)
        for row, labels in enumerate(list(self._labels[:len(sums)])):
            cumulative, offset = 0, row * width
            buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
            for bucket, le in enumerate(self._le, offset):
                cumulative += counts.get(bucket, 0)
                exemplar = exemplars.get(bucket)
                if exemplar is None:
                    buckets.append((le, float(cumulative)))
                else:
                    buckets.append((le, float(cumulative), Exemplar(dict(exemplar[0]),
                                                                    exemplar[1], exemplar[2])))
            family.add_metric(labels, buckets, sums[row])
        yield family
