"""Every PromQL expression the controller sends, in one module.

The engine series are vLLM's, declared in :mod:`governor.contracts.metrics.vllm` (as vLLM or the
sim engine expose them); the two latency histograms come from ``slo.yaml`` (the SLI of each SLO)
and default to the service's own. Every expression aggregates ``by (instance)``: one query
answers for all targets at once.

>>> q = QuerySet.default()
>>> q.expressions()["prompt_tokens_per_second"]
'sum by (instance) (rate(vllm:prompt_tokens_total[30s]))'
>>> q.targets()
'up{job="inference"}'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from governor.contracts import promql
from governor.contracts.endpoints import JOB_INFERENCE
from governor.contracts.metrics import service, vllm
from governor.contracts.metrics.prometheus import LABEL_INSTANCE, LABEL_JOB, LABEL_LE, UP

BY_INSTANCE: Final = (LABEL_INSTANCE,)
# The quantile that shows prefill spikes while they are too rare for the SLO's P99.
SPIKE_QUANTILE: Final = 0.999


@dataclass(frozen=True, slots=True)
class HistogramSli:
    """A latency histogram and the label matchers that select the SLI's series."""

    metric: str
    selector: Mapping[str, str] = field(default_factory=dict)
    # The SLO's threshold, a bucket edge of the histogram (``None``: no good-event queries).
    threshold_seconds: float | None = None

    @property
    def matchers(self) -> tuple[promql.Matcher, ...]:
        return promql.equal_to(self.selector)

    def good_matchers(self) -> tuple[promql.Matcher, ...]:
        """The selector plus ``le`` at the threshold, written as the client libraries write it."""
        assert self.threshold_seconds is not None
        return (*self.matchers, promql.eq(LABEL_LE, promql.exposition_float(
            self.threshold_seconds)))


@dataclass(frozen=True, slots=True)
class QuerySet:
    """The expressions behind one :class:`governor.controller.model.Observation` per instance."""

    itl: HistogramSli
    itl_quantile: float
    ttft: HistogramSli | None
    ttft_quantile: float
    short_window_seconds: int = 30
    long_window_seconds: int = 300
    job: str = JOB_INFERENCE

    @classmethod
    def default(cls) -> QuerySet:
        return cls(HistogramSli(service.INTER_TOKEN_LATENCY.name, threshold_seconds=0.12), 0.99,
                   HistogramSli(service.TIME_TO_FIRST_TOKEN.name, threshold_seconds=1.0), 0.99)

    def expressions(self) -> dict[str, str]:
        """Observation field name → PromQL returning one sample per ``instance``."""
        short = promql.format_seconds(self.short_window_seconds)
        long = promql.format_seconds(self.long_window_seconds)
        exprs = {
            "itl_tail_seconds": _quantile(self.itl_quantile, self.itl, short),
            "itl_median_seconds": _quantile(0.5, self.itl, short),
            "itl_tail_long_seconds": _quantile(self.itl_quantile, self.itl, long),
            "itl_mean_seconds": promql.mean(self.itl.metric, self.itl.matchers, short, BY_INSTANCE),
            "itl_spike_seconds": _quantile(SPIKE_QUANTILE, self.itl, long),
            "prompt_tokens_per_second": _sum_rate(vllm.PROMPT_TOKENS.total, short),
            "generation_tokens_per_second": _sum_rate(vllm.GENERATION_TOKENS.total, short),
            "requests_running": promql.sum_by(BY_INSTANCE, vllm.NUM_REQUESTS_RUNNING.name),
            "requests_waiting": promql.sum_by(BY_INSTANCE, vllm.NUM_REQUESTS_WAITING.name),
            "waiting_growth_per_second":
                promql.sum_by(BY_INSTANCE, promql.deriv(vllm.NUM_REQUESTS_WAITING.name, long)),
            "kv_cache_usage_ratio": promql.max_by(BY_INSTANCE, vllm.KV_CACHE_USAGE.name),
            "preemptions_per_second": _sum_rate(vllm.NUM_PREEMPTIONS.total, long),
        }
        if self.itl.threshold_seconds is not None:
            exprs["itl_good_ratio"] = promql.ratio_of_rates(
                promql.Selector(self.itl.metric + "_bucket", self.itl.good_matchers()),
                promql.Selector(self.itl.metric + "_count", self.itl.matchers), short,
                BY_INSTANCE)
        if self.ttft is not None:
            exprs["ttft_tail_seconds"] = _quantile(self.ttft_quantile, self.ttft, short)
            exprs["ttft_per_second"] = _sum_rate(
                promql.Selector(self.ttft.metric + "_count", self.ttft.matchers), short)
            if self.ttft.threshold_seconds is not None:
                exprs["ttft_good_per_second"] = _sum_rate(
                    promql.Selector(self.ttft.metric + "_bucket", self.ttft.good_matchers()),
                    short)
        return exprs

    def targets(self) -> str:
        """The inference instances Prometheus scrapes (the only ones the controller will touch)."""
        return promql.Selector(UP.name, (promql.eq(LABEL_JOB, self.job),)).render()


def _quantile(quantile: float, sli: HistogramSli, window: str) -> str:
    # Grouped by instance, then le: the order these queries have always been sent in.
    return promql.histogram_quantile(quantile, sli.metric, sli.matchers, window,
                                by=(LABEL_INSTANCE, LABEL_LE))


def _sum_rate(counter: promql.Vector, window: str) -> str:
    return promql.sum_by(BY_INSTANCE, promql.rate(counter, window))
