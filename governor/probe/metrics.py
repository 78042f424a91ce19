"""The probe's series (:mod:`governor.contracts.metrics.probe`), in the registry it is given.

Every replica's counters exist from the start at 0 for every result, so a ratio SLI over them
reads 0 rather than nothing before the first failure::

    metrics = ProbeMetrics(registry, replicas, interval_seconds=15)
    metrics.observe(replica, result, finished_at=time.time())
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from governor.contracts.instruments import counter, gauge, histogram
from governor.contracts.metrics import probe as m
from governor.probe.result import ProbeResult, Replica


class ProbeMetrics:
    def __init__(self, registry: CollectorRegistry, replicas: Sequence[Replica],
                 interval_seconds: float) -> None:
        self._ttft = histogram(m.TIME_TO_FIRST_TOKEN, registry)
        self._itl = histogram(m.INTER_TOKEN_LATENCY, registry)
        self._requests = counter(m.REQUESTS, registry)
        self._success = gauge(m.SUCCESS, registry)
        self._last = gauge(m.LAST_PROBE, registry)
        gauge(m.INTERVAL, registry).set(interval_seconds)
        for replica in replicas:
            for result in m.RESULTS:
                self._requests.labels(replica.target, replica.url, result)
            self._ttft.labels(replica.target, replica.url)
            self._itl.labels(replica.target, replica.url)

    def observe(self, replica: Replica, result: ProbeResult, finished_at: float) -> None:
        labels = (replica.target, replica.url)
        self._requests.labels(*labels, result.result).inc()
        self._success.labels(*labels).set(1.0 if result.ok else 0.0)
        self._last.labels(*labels).set(finished_at)
        if result.ttft_seconds is not None:
            self._ttft.labels(*labels).observe(result.ttft_seconds)
        itl = self._itl.labels(*labels)
        for gap in result.itl_seconds:
            itl.observe(gap)
