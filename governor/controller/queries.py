"""Every PromQL expression the controller sends, in one module.

The controller may not import ``inference`` (runtime components stay independent), so the metric
names it reads are restated here as constants; ``tests/controller/test_queries.py`` asserts that
each equals its twin in ``inference/metric_names.py``, so they cannot drift. The two latency
histograms come from ``slo.yaml`` (the SLI of each SLO); the constants are their defaults.

Every expression aggregates ``by (instance)``: one query answers for all targets at once.

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

# The service's client-facing latency histograms (defaults of slo.yaml's SLIs).
ITL_HISTOGRAM: Final = "governor_inter_token_latency_seconds"
TTFT_HISTOGRAM: Final = "governor_time_to_first_token_seconds"
# vLLM's own engine series, as vLLM or the sim engine expose them (counters with ``_total``).
PROMPT_TOKENS_TOTAL: Final = "vllm:prompt_tokens_total"
GENERATION_TOKENS_TOTAL: Final = "vllm:generation_tokens_total"
NUM_PREEMPTIONS_TOTAL: Final = "vllm:num_preemptions_total"
NUM_REQUESTS_RUNNING: Final = "vllm:num_requests_running"
NUM_REQUESTS_WAITING: Final = "vllm:num_requests_waiting"
KV_CACHE_USAGE: Final = "vllm:kv_cache_usage_perc"
# Prometheus's own per-target health series.
UP: Final = "up"

INSTANCE_LABEL: Final = "instance"
# The quantile that shows prefill spikes while they are too rare for the SLO's P99.
SPIKE_QUANTILE: Final = 0.999
# The scrape job of the inference service in the generated prometheus.yml.
INFERENCE_JOB: Final = "inference"


@dataclass(frozen=True, slots=True)
class HistogramSli:
    """A latency histogram and the label matchers that select the SLI's series."""

    metric: str
    selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QuerySet:
    """The expressions behind one :class:`governor.controller.model.Observation` per instance."""

    itl: HistogramSli
    itl_quantile: float
    ttft: HistogramSli | None
    ttft_quantile: float
    short_window_seconds: int = 30
    long_window_seconds: int = 300
    job: str = INFERENCE_JOB

    @classmethod
    def default(cls) -> QuerySet:
        return cls(HistogramSli(ITL_HISTOGRAM), 0.99, HistogramSli(TTFT_HISTOGRAM),
                   0.99)

    def expressions(self) -> dict[str, str]:
        """Observation field name → PromQL returning one sample per ``instance``."""
        short, long = _duration(self.short_window_seconds), _duration(self.long_window_seconds)
        exprs = {
            "itl_tail_seconds": _quantile(self.itl_quantile, self.itl, short),
            "itl_median_seconds": _quantile(0.5, self.itl, short),
            "itl_tail_long_seconds": _quantile(self.itl_quantile, self.itl, long),
            "itl_mean_seconds": _mean(self.itl, short),
            "itl_spike_seconds": _quantile(SPIKE_QUANTILE, self.itl, long),
            "prompt_tokens_per_second": _sum_rate(PROMPT_TOKENS_TOTAL, short),
            "generation_tokens_per_second": _sum_rate(GENERATION_TOKENS_TOTAL, short),
            "requests_running": f"sum by ({INSTANCE_LABEL}) ({NUM_REQUESTS_RUNNING})",
            "requests_waiting": f"sum by ({INSTANCE_LABEL}) ({NUM_REQUESTS_WAITING})",
            "waiting_growth_per_second":
                f"sum by ({INSTANCE_LABEL}) (deriv({NUM_REQUESTS_WAITING}[{long}]))",
            "kv_cache_usage_ratio": f"max by ({INSTANCE_LABEL}) ({KV_CACHE_USAGE})",
            "preemptions_per_second": _sum_rate(NUM_PREEMPTIONS_TOTAL, long),
        }
        if self.ttft is not None:
            exprs["ttft_tail_seconds"] = _quantile(self.ttft_quantile, self.ttft, short)
        return exprs

    def targets(self) -> str:
        """The inference instances Prometheus scrapes (the only ones the controller will touch)."""
        return f"{UP}{_selector({'job': self.job})}"


def _quantile(q: float, sli: HistogramSli, window: str) -> str:
    series = f"{sli.metric}_bucket{_selector(sli.selector)}"
    return (f"histogram_quantile({q:g}, sum by ({INSTANCE_LABEL}, le) "
            f"(rate({series}[{window}])))")


def _mean(sli: HistogramSli, window: str) -> str:
    sel = _selector(sli.selector)
    return (f"sum by ({INSTANCE_LABEL}) (rate({sli.metric}_sum{sel}[{window}])) / "
            f"sum by ({INSTANCE_LABEL}) (rate({sli.metric}_count{sel}[{window}]))")


def _sum_rate(counter: str, window: str) -> str:
    return f"sum by ({INSTANCE_LABEL}) (rate({counter}[{window}]))"


def _selector(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _duration(seconds: int) -> str:
    return f"{seconds}s"
