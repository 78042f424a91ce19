"""The service's own ``governor_*`` series, registered into the registry it is given.

Latencies are as the client sees them on the HTTP stream; each observation carries the trace id
as an exemplar, exposed when Prometheus scrapes with OpenMetrics (``Accept:
application/openmetrics-text``), so a latency spike on a board links to its trace. Names, help,
labels and buckets are declared in :mod:`governor.contracts.metrics.service`. What every request
or every token observes is a counted family (:mod:`governor.inference.telemetry.counted`: plain
numbers, no lock per observation); the rest are prometheus_client's instruments. The latency
histograms are labelled by request class; their children are made once per class here, so that
observing a token costs no label lookup::

    metrics = ServiceMetrics(registry, "llama", classes=("doc", "chat"))
    metrics.latency("doc").ttft.observe(0.4)
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.metrics_core import Metric as Family

from governor.admission.deadline import WaitSample
from governor.contracts.declaration import Metric
from governor.contracts.families import info_family
from governor.contracts.instruments import counter, gauge, info
from governor.contracts.metrics import runtime
from governor.contracts.metrics import service as m
from governor.contracts.stages import BEFORE_FIRST_TOKEN, Stage
from governor.inference.admission.queue import AdmissionQueue
from governor.inference.engines.base import BatchingLimits
from governor.inference.telemetry.counted import (
    CountedCounter,
    CountedHistogram,
    HistogramChild,
    Value,
)
from governor.inference.telemetry.stages import RequestStages

# The record's first values are the stages before the first token (observed at it).
_BEFORE_FIRST: Final = len(BEFORE_FIRST_TOKEN)


@dataclass(frozen=True, slots=True)
class ClassLatency:
    """The time-to-first-token and inter-token histograms of one request class."""

    ttft: HistogramChild
    itl: HistogramChild


@dataclass(frozen=True, slots=True)
class ClassAdmission:
    """What the admission queue counts of one request class: the requests it let into the
    engine, and the deadline gate's predicted wait beside the real one."""

    admitted: Value
    predicted_wait: HistogramChild
    wait: HistogramChild

    def observe_wait(self, sample: WaitSample) -> None:
        if sample.predicted_seconds is not None:
            self.predicted_wait.observe(sample.predicted_seconds)
            self.wait.observe(sample.actual_seconds)


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry, model: str,
                 classes: Sequence[str] = (m.DEFAULT_CLASS,),
                 latency_buckets: Mapping[str, tuple[float, ...]] | None = None) -> None:
        """``latency_buckets``: histogram name → edges replacing the declared ones (slo.yaml's
        thresholds added, :mod:`governor.slo.service_buckets`)."""
        self._model = model
        self._registry = registry
        edges = latency_buckets or {}

        def latency(metric: Metric) -> CountedHistogram:
            buckets = edges.get(metric.name, metric.buckets)
            return CountedHistogram(replace(metric, buckets=tuple(buckets)), registry)

        ttft = latency(m.TIME_TO_FIRST_TOKEN)
        itl = latency(m.INTER_TOKEN_LATENCY)
        # Every class's series exist from the start, so rates and ratios per class read 0, not
        # nothing, before its first request.
        self._latency = {name: ClassLatency(ttft.labels(model, name), itl.labels(model, name))
                         for name in classes}
        # The synthetic probe's requests are timed as any other's, into histograms no scrape
        # reads: its latency stays out of the SLIs (governor_probe_requests_served counts them).
        unread = CollectorRegistry()
        self.unobserved = ClassLatency(CountedHistogram(m.TIME_TO_FIRST_TOKEN, unread).labels(
            model, m.DEFAULT_CLASS), CountedHistogram(m.INTER_TOKEN_LATENCY, unread).labels(
            model, m.DEFAULT_CLASS))
        self.probe_requests = CountedCounter(m.PROBE_REQUESTS_SERVED, registry)
        self.probe_mark_rejected = CountedCounter(m.PROBE_MARK_REJECTED, registry)
        for reason in m.PROBE_MARK_REJECTION_REASONS:  # each reads 0 before its first refusal
            self.probe_mark_rejected.labels(reason)
        self.duration = latency(m.REQUEST_DURATION)
        # Observed for every request, a dozen values at once.
        self._stages = CountedHistogram(m.REQUEST_STAGE, registry,
                                        [[stage.value] for stage in Stage])
        self._prompt_bytes = CountedHistogram(m.REQUEST_PROMPT_BYTES, registry).labels()
        self._prompt_tokens = CountedHistogram(m.REQUEST_PROMPT_TOKENS, registry).labels()
        by_prompt = CountedHistogram(m.TIME_TO_FIRST_TOKEN_BY_PROMPT, registry)
        self._ttft_by_prompt = {size: by_prompt.labels(size) for size in m.PROMPT_SIZES}
        self.requests = CountedCounter(m.REQUESTS, registry)
        self._in_flight = gauge(m.REQUESTS_IN_FLIGHT, registry)
        self._queue_depth = gauge(m.QUEUE_DEPTH, registry)
        self.rejections = counter(m.ADMISSION_REJECTIONS, registry)
        admitted = CountedCounter(m.ADMITTED_REQUESTS, registry)
        predicted = CountedHistogram(m.ADMISSION_PREDICTED_WAIT, registry)
        waited = CountedHistogram(m.ADMISSION_WAIT, registry)
        self._admission = {name: ClassAdmission(admitted.labels(name), predicted.labels(name),
                                                waited.labels(name)) for name in classes}
        self._prefill_rate = gauge(m.ADMISSION_PREFILL_RATE, registry)
        self._backlog = gauge(m.ADMISSION_BACKLOG, registry)
        self._slack = gauge(m.ADMISSION_DEADLINE_SLACK, registry)
        self.connections_refused = counter(m.CONNECTIONS_REFUSED, registry)
        for reason in m.CONNECTION_REFUSAL_REASONS:  # each reads 0 before its first refusal
            self.connections_refused.labels(reason)
        self.prompt_tokens: Value = CountedCounter(m.PROMPT_TOKENS, registry).labels(model)
        self.generation_tokens: Value = CountedCounter(m.GENERATION_TOKENS,
                                                      registry).labels(model)
        self.stream_write_seconds: Value = CountedCounter(m.STREAM_WRITE_SECONDS,
                                                         registry).labels(model)
        self.limit = gauge(m.BATCHING_LIMIT, registry)
        self.floor = gauge(m.BATCHING_FLOOR, registry)
        self.ceiling = gauge(m.BATCHING_CEILING, registry)
        self.limit_changes = counter(m.BATCHING_CHANGES, registry)
        self.engine_ready = gauge(m.ENGINE_READY, registry)
        self.startup = gauge(m.STARTUP, registry)
        self.warmup_first_token = gauge(m.WARMUP_FIRST_TOKEN, registry)
        self.info = info(m.SERVICE_INFO, registry)
        self.runtime = info(runtime.RUNTIME_INFO, registry)

    def latency(self, request_class: str) -> ClassLatency:
        return self._latency[request_class]

    def admission(self, request_class: str) -> ClassAdmission:
        return self._admission[request_class]

    def observe_first_token_stages(self, seconds: Collection[float]) -> None:
        """At a request's first token, its stages before it (:meth:`StageClock.first_token`):
        the parts of the first-token latency are seen when it is, not when the stream ends."""
        self._stages.observe_rows(seconds)  # the first of Stage's, in order

    def observe_stages(self, stages: RequestStages) -> None:
        """Every stage of a request that reached the engine, zeros included, those before the
        first token only if they were not observed at it: each stage then counts every such
        request once, and over whole requests the stages' means add up to the mean duration."""
        values = tuple(stages.seconds.values())  # in the order of Stage
        if stages.reached_first_token:
            self._stages.observe_rows(values[_BEFORE_FIRST:], _BEFORE_FIRST)
        else:
            self._stages.observe_rows(values)

    def observe_prompt(self, prompt_bytes: int, prompt_tokens: int) -> None:
        self._prompt_bytes.observe(prompt_bytes)
        self._prompt_tokens.observe(prompt_tokens)

    def observe_ttft_by_prompt(self, prompt_tokens: int, seconds: float) -> None:
        self._ttft_by_prompt[m.prompt_size(prompt_tokens)].observe(seconds)

    def set_runtime(self, versions: Mapping[str, str]) -> None:
        self.runtime.info(dict(versions))

    def set_info(self, engine: str, model: str, version: str) -> None:
        self.info.info({m.LABEL_ENGINE: engine, m.LABEL_MODEL: model, m.LABEL_VERSION: version})

    def set_gpus(self, uuids: Sequence[str]) -> None:
        """``governor_engine_gpu_info{uuid}`` for each GPU the engine runs on (call once)."""
        self._registry.register(_EngineGpus(tuple(uuids)))

    def read_queue(self, queue: AdmissionQueue) -> None:
        """The in-flight and queue-depth gauges read ``queue`` when scraped (no cost per
        request)."""
        self._in_flight.set_function(lambda: queue.in_flight)
        self._queue_depth.set_function(lambda: queue.waiting)
        gate = queue.gate
        self._prefill_rate.set_function(lambda: gate.rate or 0.0)
        self._backlog.set_function(lambda: gate.pending_tokens + gate.queued_tokens)
        self._slack.set_function(lambda: gate.settings.slack)

    def set_limits(self, gauge: Gauge, limits: BatchingLimits) -> None:
        gauge.labels(m.PARAM_MAX_NUM_SEQS).set(limits.max_num_seqs)
        gauge.labels(m.PARAM_MAX_NUM_BATCHED_TOKENS).set(limits.max_num_batched_tokens)


@dataclass(frozen=True, slots=True)
class _EngineGpus:
    uuids: tuple[str, ...]

    def collect(self) -> Iterator[Family]:
        family = info_family(m.ENGINE_GPU_INFO)
        for uuid in self.uuids:
            family.add_metric([uuid], {})
        yield family
