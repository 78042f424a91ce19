"""``governor_request_stage_seconds{stage}`` as a collector of plain counts.

Each request that reached the engine observes all of its stages at once, so a histogram per
stage with a lock per observation would cost a dozen locked observations per request; this
collector keeps a row of bucket counts and a sum per stage, updated on the event loop (the only
writer), and renders the family when scraped (``/metrics`` renders in a worker thread, so a
scrape copies each row first: it may miss an observation in flight, never count half of one in
its buckets)::

    stages = StageHistogram(registry)
    stages.observe(record)                 # a RequestStages
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily

from governor.contracts.families import histogram_family
from governor.contracts.metrics.service import REQUEST_STAGE
from governor.contracts.promql import exposition_float
from governor.contracts.stages import Stage
from governor.inference.stages import RequestStages

_EDGES = REQUEST_STAGE.buckets
_LE = (*(exposition_float(edge) for edge in _EDGES), "+Inf")


class StageHistogram:
    def __init__(self, registry: CollectorRegistry) -> None:
        # One row per stage, in the order of Stage (and of every RequestStages).
        self._counts = [[0] * len(_LE) for _ in Stage]
        self._sums = [0.0] * len(self._counts)
        registry.register(self)

    def observe(self, stages: RequestStages) -> None:
        """Every stage of one request (zeros included: each stage counts every request)."""
        for row, seconds in enumerate(stages.seconds.values()):
            self._counts[row][bisect_left(_EDGES, seconds)] += 1
            self._sums[row] += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = histogram_family(REQUEST_STAGE)
        for stage, row, total in zip(Stage, self._counts, self._sums, strict=True):
            counts, cumulative, buckets = list(row), 0, []
            for le, count in zip(_LE, counts, strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric([stage.value], buckets, total)
        yield family
