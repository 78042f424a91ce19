"""The latency histograms a latency SLI of ``slo.yaml`` may count, with their bucket edges.

A latency SLI counts the ``le`` bucket at its threshold, so every threshold (an SLO's, or a
request class's) must be an edge of the histogram the service or vLLM really exposes::

    >>> HISTOGRAM_BUCKETS["governor_inter_token_latency_seconds"][12]
    0.12
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

from governor.contracts.metrics import probe, service, vllm

HISTOGRAM_BUCKETS: Final[Mapping[str, Sequence[float]]] = MappingProxyType({
    histogram.name: histogram.buckets
    for histogram in (*service.LATENCY_HISTOGRAMS, *vllm.LATENCY_HISTOGRAMS,
                      *probe.LATENCY_HISTOGRAMS)
})
