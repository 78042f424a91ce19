"""The service's own ``governor_*`` series, registered into the registry it is given.

Latencies are as the client sees them on the HTTP stream; each observation carries the trace id
as an exemplar, exposed when Prometheus scrapes with OpenMetrics (``Accept:
application/openmetrics-text``), so a latency spike on a board links to its trace. Names, help,
labels and buckets are declared in :mod:`governor.contracts.metrics.service`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from governor.contracts.instruments import counter, gauge, histogram, info
from governor.contracts.metrics import service as m
from governor.inference.engines.base import BatchingLimits


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self._model = model
        self.ttft = histogram(m.TIME_TO_FIRST_TOKEN, registry).labels(model)
        self.itl = histogram(m.INTER_TOKEN_LATENCY, registry).labels(model)
        self.duration = histogram(m.REQUEST_DURATION, registry)
        self.requests = counter(m.REQUESTS, registry)
        self.in_flight = gauge(m.REQUESTS_IN_FLIGHT, registry)
        self.queue_depth = gauge(m.QUEUE_DEPTH, registry)
        self.rejections = counter(m.ADMISSION_REJECTIONS, registry)
        self.prompt_tokens = counter(m.PROMPT_TOKENS, registry).labels(model)
        self.generation_tokens = counter(m.GENERATION_TOKENS, registry).labels(model)
        self.limit = gauge(m.BATCHING_LIMIT, registry)
        self.floor = gauge(m.BATCHING_FLOOR, registry)
        self.ceiling = gauge(m.BATCHING_CEILING, registry)
        self.limit_changes = counter(m.BATCHING_CHANGES, registry)
        self.engine_ready = gauge(m.ENGINE_READY, registry)
        self.info = info(m.SERVICE_INFO, registry)

    def set_info(self, engine: str, model: str, version: str) -> None:
        self.info.info({m.LABEL_ENGINE: engine, m.LABEL_MODEL: model, m.LABEL_VERSION: version})

    def set_queue(self, in_flight: int, waiting: int) -> None:
        self.in_flight.set(in_flight)
        self.queue_depth.set(waiting)

    def set_limits(self, gauge: Gauge, limits: BatchingLimits) -> None:
        gauge.labels(m.PARAM_MAX_NUM_SEQS).set(limits.max_num_seqs)
        gauge.labels(m.PARAM_MAX_NUM_BATCHED_TOKENS).set(limits.max_num_batched_tokens)
