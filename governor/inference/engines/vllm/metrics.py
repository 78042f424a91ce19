"""vLLM's own ``vllm:*`` series, exposed through the service's registry.

vLLM's ``PrometheusStatLogger`` registers into the process-wide ``prometheus_client.REGISTRY``;
the service renders its own registry. :class:`VllmMetricsBridge` is a collector in the service's
registry that yields, at scrape time, the ``vllm:*`` families it finds in vLLM's registry — the
same objects, so the samples are vLLM's own and nothing is copied or kept::

    registry.register(VllmMetricsBridge(prometheus_client.REGISTRY))

It declares no names (no ``describe``), so it can never clash with the service's ``governor_*``
collectors at registration, and it passes through only the ``vllm:`` prefix, so it cannot
duplicate them at scrape time either.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client.metrics_core import Metric

from governor.contracts.metrics.vllm import PREFIX


class MetricSource(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class VllmMetricsBridge:
    """A collector re-exposing the ``vllm:`` families of another registry."""

    def __init__(self, source: MetricSource, prefix: str = PREFIX) -> None:
        self._source = source
        self._prefix = prefix

    def describe(self) -> Iterator[Metric]:
        """No names: a registry with ``auto_describe`` would otherwise call :meth:`collect` at
        registration and reserve whatever vLLM families happened to exist then."""
        return iter(())

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            if family.name.startswith(self._prefix):
                yield family
