"""What the generators know about the metrics they read: histograms and their bucket edges.

A latency SLI counts the ``le`` bucket at its threshold, so the threshold must be an edge of the
histogram the service really exposes; :func:`load_checked_spec` enforces it with the edges
declared next to each metric name (:mod:`governor.contracts.metrics.latency`), replaced where the
spec says vLLM exposes others (``vllm.custom_histogram_buckets``); the service's own histograms
take every threshold the spec sets on them as one more edge (:mod:`governor.slo.service_buckets`).
:func:`histogram_edges` gives the edges in force for a spec, to the generators and the benchmark
alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from governor.contracts.metrics.latency import HISTOGRAM_BUCKETS
from governor.slo.service_buckets import service_edges
from governor.slo.spec import SloSpec, load_spec, parse_spec

__all__ = ["HISTOGRAM_BUCKETS", "histogram_edges", "load_checked_spec", "parse_checked_spec"]


def load_checked_spec(path: str | Path) -> SloSpec:
    """:func:`governor.slo.spec.load_spec`, plus the bucket-edge check of every latency SLI."""
    return load_spec(path, histograms=HISTOGRAM_BUCKETS)


def parse_checked_spec(data: object, source: str = "<memory>") -> SloSpec:
    return parse_spec(data, source, histograms=HISTOGRAM_BUCKETS)


def histogram_edges(spec: SloSpec) -> Mapping[str, Sequence[float]]:
    """Histogram name → the bucket edges its servers expose under this spec: vLLM's as
    ``vllm.custom_histogram_buckets`` tells it, the service's with the spec's thresholds added
    (``governor serve --slo`` adds them too)."""
    return MappingProxyType({**spec.vllm.edges(HISTOGRAM_BUCKETS), **service_edges(spec)})
