"""The service's own ``governor_*`` series, registered into the registry it is given.

Latencies are as the client sees them on the HTTP stream; each observation carries the trace id
as an exemplar, exposed when Prometheus scrapes with OpenMetrics (``Accept:
application/openmetrics-text``), so a latency spike on a board links to its trace.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from governor.inference import metric_names as m
from governor.inference.engines.base import BatchingLimits


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self._model = model
        self.ttft = Histogram(
            m.TIME_TO_FIRST_TOKEN,
            "Time from request arrival to the first streamed token, as seen by the client.",
            [m.LABEL_MODEL],
            buckets=m.TIME_TO_FIRST_TOKEN_BUCKETS,
            registry=registry,
        ).labels(model)
        self.itl = Histogram(
            m.INTER_TOKEN_LATENCY,
            "Time between successive streamed tokens of one response, as seen by the client.",
            [m.LABEL_MODEL],
            buckets=m.INTER_TOKEN_LATENCY_BUCKETS,
            registry=registry,
        ).labels(model)
        self.duration = Histogram(
            m.REQUEST_DURATION,
            "Time from request arrival to the end of the response.",
            [m.LABEL_ROUTE],
            buckets=m.REQUEST_DURATION_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            m.REQUESTS, "Finished HTTP requests by route and status code.",
            [m.LABEL_ROUTE, m.LABEL_CODE], registry=registry,
        )
        self.in_flight = Gauge(
            m.REQUESTS_IN_FLIGHT, "Generation requests holding an engine slot.", registry=registry
        )
        self.queue_depth = Gauge(
            m.QUEUE_DEPTH, "Generation requests waiting in the admission queue.", registry=registry
        )
        self.rejections = Counter(
            m.ADMISSION_REJECTIONS, "Requests turned away by the admission queue.",
            [m.LABEL_REASON], registry=registry,
        )
        self.prompt_tokens = Counter(
            m.PROMPT_TOKENS, "Prompt tokens of admitted requests.", [m.LABEL_MODEL],
            registry=registry,
        ).labels(model)
        self.generation_tokens = Counter(
            m.GENERATION_TOKENS, "Tokens generated and sent to clients.", [m.LABEL_MODEL],
            registry=registry,
        ).labels(model)
        self.limit = Gauge(
            m.BATCHING_LIMIT, "Batching limit in force in the engine.", [m.LABEL_PARAM],
            registry=registry,
        )
        self.floor = Gauge(
            m.BATCHING_FLOOR, "Lowest batching limit the admin API accepts.", [m.LABEL_PARAM],
            registry=registry,
        )
        self.ceiling = Gauge(
            m.BATCHING_CEILING, "Start-up batching limit; live retuning never goes above it.",
            [m.LABEL_PARAM], registry=registry,
        )
        self.limit_changes = Counter(
            m.BATCHING_CHANGES, "Admin changes of the batching limits, by result.",
            [m.LABEL_RESULT], registry=registry,
        )
        self.engine_ready = Gauge(
            m.ENGINE_READY, "1 while the engine is started and alive.", registry=registry
        )
        self.info = Info(m.SERVICE_INFO, "The service's engine and model.", registry=registry)

    def set_queue(self, in_flight: int, waiting: int) -> None:
        self.in_flight.set(in_flight)
        self.queue_depth.set(waiting)

    def set_limits(self, gauge: Gauge, limits: BatchingLimits) -> None:
        gauge.labels(m.PARAM_MAX_NUM_SEQS).set(limits.max_num_seqs)
        gauge.labels(m.PARAM_MAX_NUM_BATCHED_TOKENS).set(limits.max_num_batched_tokens)
