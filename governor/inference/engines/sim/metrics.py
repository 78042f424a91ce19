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

from prometheus_client.metrics_core import Metric as Family
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from governor.contracts.families import counter_family, gauge_family, histogram_family
from governor.contracts.metrics import vllm
from governor.inference.engines.sim.request import SimRequest
from governor.inference.engines.sim.scheduler import Counters, Scheduler

ENGINE = "0"  # the value of vLLM's ``engine`` label for a single engine core


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
        self.ttft = Histogram(vllm.TIME_TO_FIRST_TOKEN.buckets)
        self.itl = Histogram(vllm.INTER_TOKEN_LATENCY.buckets)
        self.e2e = Histogram(vllm.E2E_REQUEST_LATENCY.buckets)
        self.queue = Histogram(vllm.REQUEST_QUEUE_TIME.buckets)
        self.prefill = Histogram(vllm.REQUEST_PREFILL_TIME.buckets)
        self.decode = Histogram(vllm.REQUEST_DECODE_TIME.buckets)
        self.iteration_tokens = Histogram(vllm.ITERATION_TOKENS.buckets)

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

    def describe(self) -> Iterable[Family]:
        # Families without samples: lets the registry refuse a second engine's clashing names.
        return self._families(0, 0, 0.0, Counters(), with_samples=False)

    def collect(self) -> Iterable[Family]:
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
    ) -> list[Family]:
        values = [self.model_name, ENGINE]
        families: list[Family] = []

        for declared, value in ((vllm.NUM_REQUESTS_RUNNING, running),
                                (vllm.NUM_REQUESTS_WAITING, waiting),
                                (vllm.KV_CACHE_USAGE, usage)):
            gauge = gauge_family(declared)
            if with_samples:
                gauge.add_metric(values, value)
            families.append(gauge)

        for declared, count in ((vllm.PROMPT_TOKENS, totals.prompt_tokens),
                                (vllm.GENERATION_TOKENS, totals.generation_tokens),
                                (vllm.NUM_PREEMPTIONS, totals.preemptions),
                                (vllm.PREFIX_CACHE_QUERIES, totals.prefix_cache_queries),
                                (vllm.PREFIX_CACHE_HITS, totals.prefix_cache_hits)):
            counter = counter_family(declared)
            if with_samples:
                counter.add_metric(values, count, created=self.created)
            families.append(counter)

        success = counter_family(vllm.REQUEST_SUCCESS)
        if with_samples:
            finished = {str(reason): n for reason, n in totals.finished.items()}
            for reason in vllm.FINISHED_REASONS:
                success.add_metric([*values, reason], finished.get(reason, 0), created=self.created)
        families.append(success)

        for declared, data in ((vllm.TIME_TO_FIRST_TOKEN, self.ttft),
                               (vllm.INTER_TOKEN_LATENCY, self.itl),
                               (vllm.E2E_REQUEST_LATENCY, self.e2e),
                               (vllm.REQUEST_QUEUE_TIME, self.queue),
                               (vllm.REQUEST_PREFILL_TIME, self.prefill),
                               (vllm.REQUEST_DECODE_TIME, self.decode),
                               (vllm.ITERATION_TOKENS, self.iteration_tokens)):
            histogram = histogram_family(declared)
            if with_samples:
                histogram.add_metric(values, data.buckets(), data.total)
            families.append(histogram)
        return families
