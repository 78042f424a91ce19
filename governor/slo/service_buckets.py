"""The edges of the service's own latency histograms: its defaults plus every threshold the spec
puts on them.

A latency SLI counts the ``le`` bucket at its threshold. vLLM's histograms take other edges only
through ``--custom-histogram-buckets`` (:mod:`governor.slo.buckets`); ``governor serve`` builds its
histograms from the spec it is given (``--slo``), so any threshold an SLO or a request class sets
on ``governor_time_to_first_token_seconds``, ``governor_inter_token_latency_seconds`` or
``governor_request_duration_seconds`` simply becomes one more edge, in the service and in the
rules alike::

    >>> edges = grown_edges({"governor_request_duration_seconds": (0.5, 1.0)},
    ...                     [("governor_request_duration_seconds", 0.8)])
    >>> edges["governor_request_duration_seconds"]
    (0.5, 0.8, 1.0)

The edges are what vLLM accepts for its flag: positive, finite, strictly increasing, at most
:data:`~governor.slo.buckets.MAX_EDGES` (each edge is one more series per label set).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from governor.contracts.metrics import service
from governor.slo.buckets import MAX_EDGES
from governor.slo.classes import RequestClasses
from governor.slo.model import SLO, LatencySLI, SloSpec

# The histograms whose edges follow the spec: the service's own latency histograms.
GROWING: Final = frozenset(metric.name for metric in service.LATENCY_HISTOGRAMS)
DEFAULTS: Final[Mapping[str, tuple[float, ...]]] = {
    metric.name: metric.buckets for metric in service.LATENCY_HISTOGRAMS}


def grows(metric: str) -> bool:
    """Whether a threshold on ``metric`` becomes an edge instead of having to be one."""
    return metric in GROWING


def add_edges(edges: Sequence[float], thresholds: Iterable[float]) -> tuple[float, ...]:
    """``edges`` with each threshold that is not already one (within float noise), sorted."""
    grown = list(edges)
    for threshold in thresholds:
        if not any(math.isclose(edge, threshold, rel_tol=1e-9) for edge in grown):
            grown.append(threshold)
    return tuple(sorted(grown))


def grown_edges(
    defaults: Mapping[str, Sequence[float]], thresholds: Iterable[tuple[str, float]],
) -> dict[str, tuple[float, ...]]:
    """Each growing histogram of ``defaults`` → its edges with the ``(metric, threshold)`` pairs
    on it added."""
    found: dict[str, list[float]] = {}
    for metric, threshold in thresholds:
        if metric in GROWING:
            found.setdefault(metric, []).append(threshold)
    return {name: add_edges(edges, found.get(name, ())) for name, edges in defaults.items()
            if name in GROWING}


def too_many(edges: Mapping[str, Sequence[float]]) -> list[str]:
    """Why these edges could not be exposed: one line per histogram over :data:`MAX_EDGES`."""
    return [f"{name} would have {len(found)} bucket edges with the spec's thresholds added; at "
            f"most {MAX_EDGES} (use fewer distinct thresholds on it)"
            for name, found in sorted(edges.items()) if len(found) > MAX_EDGES]


def thresholds(slos: Sequence[SLO], classes: RequestClasses) -> list[tuple[str, float]]:
    """Every (histogram, threshold) the latency SLOs and the request classes' own targets count."""
    found = []
    for slo in slos:
        if isinstance(slo.sli, LatencySLI):
            found.append((slo.sli.metric, slo.sli.threshold_seconds))
            found.extend((slo.sli.metric, c.threshold(slo.name, slo.sli.threshold_seconds))
                         for c in classes.classes)
    return found


def service_edges(spec: SloSpec) -> dict[str, tuple[float, ...]]:
    """The service's latency histograms → the edges ``governor serve --slo`` exposes."""
    return grown_edges(DEFAULTS, thresholds(spec.slos, spec.classes))
