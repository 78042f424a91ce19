"""What the generators know about the metrics they read: histograms and their bucket edges.

A latency SLI counts the ``le`` bucket at its threshold, so the threshold must be an edge of the
histogram the service really exposes; :func:`load_checked_spec` enforces it with the edges
declared next to each metric name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Final

from governor.inference import metric_names as m
from governor.slo.spec import SloSpec, load_spec, parse_spec

HISTOGRAM_BUCKETS: Final[Mapping[str, Sequence[float]]] = MappingProxyType({
    m.INTER_TOKEN_LATENCY: m.INTER_TOKEN_LATENCY_BUCKETS,
    m.TIME_TO_FIRST_TOKEN: m.TIME_TO_FIRST_TOKEN_BUCKETS,
    m.REQUEST_DURATION: m.REQUEST_DURATION_BUCKETS,
    m.VLLM_INTER_TOKEN_LATENCY: m.VLLM_ITL_BUCKETS,
    m.VLLM_TIME_TO_FIRST_TOKEN: m.VLLM_TTFT_BUCKETS,
    m.VLLM_E2E_REQUEST_LATENCY: m.VLLM_REQUEST_LATENCY_BUCKETS,
    m.VLLM_REQUEST_QUEUE_TIME: m.VLLM_REQUEST_LATENCY_BUCKETS,
    m.VLLM_REQUEST_PREFILL_TIME: m.VLLM_REQUEST_LATENCY_BUCKETS,
    m.VLLM_REQUEST_DECODE_TIME: m.VLLM_REQUEST_LATENCY_BUCKETS,
})


def load_checked_spec(path: str | Path) -> SloSpec:
    """:func:`governor.slo.spec.load_spec`, plus the bucket-edge check of every latency SLI."""
    return load_spec(path, histograms=HISTOGRAM_BUCKETS)


def parse_checked_spec(data: object, source: str = "<memory>") -> SloSpec:
    return parse_spec(data, source, histograms=HISTOGRAM_BUCKETS)
