"""vLLM's own ``vllm:*`` series, emitted by the simulated engine with vLLM's names and labels.

A collector in the prometheus_client sense: the engine updates plain numbers on its hot path
(a bisect and two additions per observation, no lock, no metric objects), and ``collect()``
builds fresh metric families from them at scrape time. Counters come straight from the
scheduler's totals and gauges from its live state, so a scrape is always current — an aborted
request leaves ``vllm:num_requests_running`` at once, not at the next step.

Observations happen where vLLM's ``PrometheusStatLogger`` makes them: TTFT at the first token,
ITL per output event, end-to-end/queue/prefill/decode time when a request finishes (client
aborts are not counted, as in vLLM's output processor), tokens per engine step.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from governor.inference import metric_names as names
from governor.inference.engines.sim.request import SimRequest
from governor.inference.engines.sim.scheduler import Counters, Scheduler

# vLLM's FinishReason values, all exposed from the start (zero until one happens).
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class Histogram:
    """Bucket counts of one histogram, cumulated only when rendered."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = list(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        if value < 0.0:
            value = 0.0  # float rounding of equal timestamps; a histogram sum must not fall
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        cumulative = 0
        rendered: list[tuple[str, float]] = []
        for bound, count in zip(
            [*map(floatToGoString, self.bounds), "+Inf"], self.counts, strict=True
        ):
            cumulative += count
            rendered.append((bound, float(cumulative)))
        return rendered

    @property
    def count(self) -> int:
        return sum(self.counts)


class VllmMetrics(Collector):
    """The simulated engine's ``vllm:*`` series for one model, engine ``"0"``."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.created = time.time()
        self.scheduler: Scheduler | None = None  # attached once the engine core exists
        self.ttft = Histogram(names.VLLM_TTFT_BUCKETS)
        self.itl = Histogram(names.VLLM_ITL_BUCKETS)
        self.e2e = Histogram(names.VLLM_REQUEST_LATENCY_BUCKETS)
        self.queue = Histogram(names.VLLM_REQUEST_LATENCY_BUCKETS)
        self.prefill = Histogram(names.VLLM_REQUEST_LATENCY_BUCKETS)
        self.decode = Histogram(names.VLLM_REQUEST_LATENCY_BUCKETS)
        self.iteration_tokens = Histogram(names.VLLM_ITERATION_TOKENS_BUCKETS)

    # ---- StepObserver ------------------------------------------------------------------------

    def on_first_token(self, request: SimRequest) -> None:
        self.ttft.observe(request.first_token_time - request.arrival_time)

    def on_inter_token(self, seconds: float) -> None:
        self.itl.observe(seconds)

    def on_finished(self, request: SimRequest) -> None:
        self.e2e.observe(request.finish_time - request.arrival_time)
        self.queue.observe(request.scheduled_time - request.queued_time)
        self.prefill.observe(request.first_token_time - request.scheduled_time)
        self.decode.observe(request.last_token_time - request.first_token_time)

    def on_step(self, iteration_tokens: int) -> None:
        self.iteration_tokens.observe(iteration_tokens)

    # ---- Collector ---------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        # Families without samples: lets the registry refuse a second engine's clashing names.
        return self._families(0, 0, 0.0, Counters(), with_samples=False)

    def collect(self) -> Iterable[Metric]:
        scheduler = self.scheduler
        if scheduler is None:
            return self._families(0, 0, 0.0, Counters(), with_samples=True)
        return self._families(
            len(scheduler.running),
            len(scheduler.waiting),
            scheduler.kv.usage,
            scheduler.counters,
            with_samples=True,
        )

    def _families(
        self, running: int, waiting: int, usage: float, totals: Counters, *, with_samples: bool
    ) -> list[Metric]:
        labels = [names.VLLM_LABEL_MODEL, names.VLLM_LABEL_ENGINE]
        values = [self.model_name, "0"]
        families: list[Metric] = []

        for name, doc, value in (
            (
                names.VLLM_NUM_REQUESTS_RUNNING,
                "Number of requests in model execution batches.",
                running,
            ),
            (
                names.VLLM_NUM_REQUESTS_WAITING,
                "Number of requests waiting to be processed.",
                waiting,
            ),
            (names.VLLM_KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent usage.", usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            if with_samples:
                gauge.add_metric(values, value)
            families.append(gauge)

        for name, doc, count in (
            (names.VLLM_PROMPT_TOKENS, "Number of prefill tokens processed.", totals.prompt_tokens),
            (
                names.VLLM_GENERATION_TOKENS,
                "Number of generation tokens processed.",
                totals.generation_tokens,
            ),
            (
                names.VLLM_NUM_PREEMPTIONS,
                "Cumulative number of preemption from the engine.",
                totals.preemptions,
            ),
            (
                names.VLLM_PREFIX_CACHE_QUERIES,
                "Prefix cache queries, in terms of number of queried tokens.",
                totals.prefix_cache_queries,
            ),
            (
                names.VLLM_PREFIX_CACHE_HITS,
                "Prefix cache hits, in terms of number of cached tokens.",
                totals.prefix_cache_hits,
            ),
        ):
            counter = CounterMetricFamily(name, doc, labels=labels)
            if with_samples:
                counter.add_metric(values, count, created=self.created)
            families.append(counter)

        success = CounterMetricFamily(
            names.VLLM_REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            labels=[*labels, names.VLLM_LABEL_FINISHED_REASON],
        )
        if with_samples:
            finished = {str(reason): n for reason, n in totals.finished.items()}
            for reason in FINISHED_REASONS:
                success.add_metric([*values, reason], finished.get(reason, 0), created=self.created)
        families.append(success)

        for name, doc, data in (
            (
                names.VLLM_TIME_TO_FIRST_TOKEN,
                "Histogram of time to first token in seconds.",
                self.ttft,
            ),
            (
                names.VLLM_INTER_TOKEN_LATENCY,
                "Histogram of inter-token latency in seconds.",
                self.itl,
            ),
            (
                names.VLLM_E2E_REQUEST_LATENCY,
                "Histogram of e2e request latency in seconds.",
                self.e2e,
            ),
            (
                names.VLLM_REQUEST_QUEUE_TIME,
                "Histogram of time spent in WAITING phase for request.",
                self.queue,
            ),
            (
                names.VLLM_REQUEST_PREFILL_TIME,
                "Histogram of time spent in PREFILL phase for request.",
                self.prefill,
            ),
            (
                names.VLLM_REQUEST_DECODE_TIME,
                "Histogram of time spent in DECODE phase for request.",
                self.decode,
            ),
            (
                names.VLLM_ITERATION_TOKENS,
                "Histogram of number of tokens per engine_step.",
                self.iteration_tokens,
            ),
        ):
            histogram = HistogramMetricFamily(name, doc, labels=labels)
            if with_samples:
                histogram.add_metric(values, data.buckets(), data.total)
            families.append(histogram)
        return families
