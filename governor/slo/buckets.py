"""The edges vLLM exposes where they are not its defaults: ``--custom-histogram-buckets``,
declared once in ``slo.yaml`` and validated as vLLM validates the flag
(:mod:`governor.slo.bucket_fields`)::

    vllm:
      custom_histogram_buckets:      # what vllm serve --custom-histogram-buckets is given
        inter_token_latency: [0.01, 0.025, 0.05, 0.075, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 1]

A latency threshold is then checked against these edges, and the generated rules, their promtool
tests, the manifests' ``vllm serve`` command line and the benchmark's model of Prometheus read
them through :meth:`VllmSettings.edges`::

    >>> v = VllmSettings((("inter_token_latency", (0.05, 0.1, 0.12)),))
    >>> v.edges({"vllm:inter_token_latency_seconds": (0.1, 0.15)})
    mappingproxy({'vllm:inter_token_latency_seconds': (0.05, 0.1, 0.12)})
    >>> v.flag_value()
    '{"inter_token_latency":[0.05,0.1,0.12]}'
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from governor.contracts.metrics.vllm import BUCKET_FAMILIES

# Every edge is one more series per label set; vLLM's longest default family has 22.
MAX_EDGES: Final = 64


def edges_problem(edges: Sequence[float]) -> str | None:
    """Why ``edges`` are not what vLLM accepts for a histogram (1 to :data:`MAX_EDGES` finite
    numbers above 0, strictly increasing), or None."""
    if not 1 <= len(edges) <= MAX_EDGES:
        return f"must be 1 to {MAX_EDGES} bucket edges: got {len(edges)}"
    for index, edge in enumerate(edges):
        if isinstance(edge, bool) or not isinstance(edge, int | float) \
                or not math.isfinite(edge) or edge <= 0:
            return f"edge {index} must be a finite number above 0: got {edge!r:.40}"
        if index and edge <= edges[index - 1]:
            return f"edge {index} ({edge!r}) must be greater than the one before it: edges " \
                   "increase strictly"
    return None


@dataclass(frozen=True)
class VllmSettings:
    """The ``vllm`` section: bucket family → the edges vLLM is told to expose (sorted by family;
    none: vLLM's defaults)."""

    custom_histogram_buckets: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def edges(self, defaults: Mapping[str, Sequence[float]]) -> Mapping[str, Sequence[float]]:
        """``defaults`` (histogram name → edges) with each custom family's histograms replaced."""
        edges = dict(defaults)
        for family, custom in self.custom_histogram_buckets:
            edges.update({metric.name: custom for metric in BUCKET_FAMILIES[family]})
        return MappingProxyType(edges)

    def flag_value(self) -> str | None:
        """The JSON ``--custom-histogram-buckets`` takes, or ``None`` when nothing is custom."""
        if not self.custom_histogram_buckets:
            return None
        return json.dumps({family: list(edges) for family, edges in self.custom_histogram_buckets},
                          separators=(",", ":"), sort_keys=True)
