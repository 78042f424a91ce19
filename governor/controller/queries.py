"""Every PromQL expression the controller sends, in one module.

The engine series are vLLM's, declared in :mod:`governor.contracts.metrics.vllm` (as vLLM or the
sim engine expose them); the two latency histograms come from ``slo.yaml`` (the SLI of each SLO)
and default to the service's own. Every selector is narrowed to the inference target of the spec
(``targets.inference``: its scrape job and extra selector), and every expression aggregates
``by (instance, engine)``: one query answers for all targets at once, with one sample per
data-parallel rank where vLLM's series name it (``engine``) and one per instance where they do
not (the service's own histograms); :mod:`governor.controller.ranks` says which rank the law
judges.

>>> q = QuerySet.default()
>>> q.expressions()["prompt_tokens_per_second"]
'sum by (instance, engine) (rate(vllm:prompt_tokens_total{job="inference"}[30s]))'
>>> q.targets()
'up{job="inference"}'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from governor.contracts import causes, promql
from governor.contracts.metrics import service, verdict, vllm
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_LE, UP
from governor.contracts.metrics.service import LABEL_STAGE
from governor.contracts.metrics.slo import LABEL_SERVICE, LABEL_SLO
from governor.contracts.stages import FIRST_TOKEN
from governor.slo.fleet import Target, Targets

BY_RANK: Final = (LABEL_INSTANCE, vllm.LABEL_ENGINE)
BY_STAGE: Final = (LABEL_INSTANCE, LABEL_STAGE)
# The quantile that shows prefill spikes while they are too rare for the SLO's P99.
SPIKE_QUANTILE: Final = 0.999
# Where the stage guard reads a typical request's time in each stage: the median.
STAGE_QUANTILE: Final = 0.5
# The engine's stages before the first token, whose tails the stage guard reads.
ENGINE_STAGES: Final = tuple(stage.value for stage in FIRST_TOKEN.engine)
# The deadline gate's refusals at arrival, which the law's admission knob reads.
_GATE_REFUSALS: Final = (service.REASON_DEADLINE, service.REASON_TOKENS_AHEAD)


@dataclass(frozen=True, slots=True)
class HistogramSli:
    """A latency histogram and the label matchers that select the SLI's series."""

    metric: str
    selector: Mapping[str, str] = field(default_factory=dict)
    # The SLO's threshold, a bucket edge of the histogram (``None``: no good-event queries).
    threshold_seconds: float | None = None
    # With request classes: the classes judged at that threshold (a class with a threshold of
    # its own, the documents' 20 s to a first token, is not the controller's to chase).
    classes: tuple[promql.Matcher, ...] = ()
    # The inference target's job and selector (set by QuerySet, which knows the target).
    scope: tuple[promql.Matcher, ...] = ()

    @property
    def matchers(self) -> tuple[promql.Matcher, ...]:
        return (*self.scope, *promql.equal_to(self.selector), *self.classes)

    def good_matchers(self) -> tuple[promql.Matcher, ...]:
        """The selector plus ``le`` at the threshold, as the client libraries write it or as
        Prometheus 3 normalises it (``1.0`` or ``1``), the generated rules' idiom."""
        assert self.threshold_seconds is not None
        return (*self.matchers, promql.le_matcher(self.threshold_seconds))


@dataclass(frozen=True, slots=True)
class QuerySet:
    """The expressions behind one :class:`governor.controller.model.Observation` per instance."""

    itl: HistogramSli
    itl_quantile: float
    ttft: HistogramSli | None
    ttft_quantile: float
    short_window_seconds: int = 30
    long_window_seconds: int = 300
    target: Target = Targets().inference
    # Whose verdict to read (governor.contracts.metrics.verdict): the spec's service and the
    # names of the decode and TTFT SLOs ("": no verdict read).
    service: str = ""
    itl_slo: str = ""
    ttft_slo: str = ""

    @property
    def scope(self) -> tuple[promql.Matcher, ...]:
        """The inference target's matchers, on every selector."""
        return self.target.matchers()

    def _on(self, name: str) -> promql.Selector:
        return promql.Selector(name, self.scope)

    def _sli(self, sli: HistogramSli) -> HistogramSli:
        return HistogramSli(sli.metric, sli.selector, sli.threshold_seconds, sli.classes,
                            self.scope)

    @classmethod
    def default(cls) -> QuerySet:
        return cls(HistogramSli(service.INTER_TOKEN_LATENCY.name, threshold_seconds=0.12), 0.99,
                   HistogramSli(service.TIME_TO_FIRST_TOKEN.name, threshold_seconds=1.0), 0.99)

    def expressions(self) -> dict[str, str]:
        """Observation field name → PromQL returning one sample per ``instance`` and rank."""
        short = promql.format_seconds(self.short_window_seconds)
        long = promql.format_seconds(self.long_window_seconds)
        itl = self._sli(self.itl)
        waiting = self._on(vllm.NUM_REQUESTS_WAITING.name)
        exprs = {
            "itl_tail_seconds": _quantile(self.itl_quantile, itl, short),
            "itl_median_seconds": _quantile(0.5, itl, short),
            "itl_tail_long_seconds": _quantile(self.itl_quantile, itl, long),
            "itl_mean_seconds": promql.mean(itl.metric, itl.matchers, short, BY_RANK),
            "itl_spike_seconds": _quantile(SPIKE_QUANTILE, itl, long),
            "prompt_tokens_per_second": _sum_rate(self._on(vllm.PROMPT_TOKENS.total), short),
            "generation_tokens_per_second":
                _sum_rate(self._on(vllm.GENERATION_TOKENS.total), short),
            "requests_running":
                promql.sum_by(BY_RANK, self._on(vllm.NUM_REQUESTS_RUNNING.name)),
            "requests_waiting": promql.sum_by(BY_RANK, waiting),
            "waiting_growth_per_second":
                promql.sum_by(BY_RANK, promql.deriv(waiting, long)),
            "kv_cache_usage_ratio":
                promql.max_by(BY_RANK, self._on(vllm.KV_CACHE_USAGE.name)),
            "preemptions_per_second": _sum_rate(self._on(vllm.NUM_PREEMPTIONS.total), long),
            # The deadline gate, where the target has one (the law's admission knob).
            "deadline_slack": promql.max_by(BY_RANK,
                                            self._on(service.ADMISSION_DEADLINE_SLACK.name)),
            "vllm_max_num_queued_tokens": promql.max_by(
                BY_RANK, self._on(service.ADMISSION_VLLM_QUEUED_TOKENS.name)),
            "admission_refused_per_second": _sum_rate(promql.Selector(
                service.ADMISSION_REJECTIONS.total,
                (*self.scope, promql.one_of(service.LABEL_REASON, _GATE_REFUSALS))), short),
        }
        if itl.threshold_seconds is not None:
            exprs["itl_good_ratio"] = promql.ratio_of_rates(
                promql.Selector(itl.metric + "_bucket", itl.good_matchers()),
                promql.Selector(itl.metric + "_count", itl.matchers), short,
                BY_RANK)
        if self.itl_slo and self.service:
            exprs["itl_verdict_burn"] = promql.Selector(verdict.BURN.name, (
                promql.eq(LABEL_SLO, self.itl_slo),
                promql.eq(LABEL_SERVICE, self.service))).render()
        if self.ttft is not None:
            ttft = self._sli(self.ttft)
            exprs["ttft_tail_seconds"] = _quantile(self.ttft_quantile, ttft, short)
            exprs["ttft_per_second"] = _sum_rate(
                promql.Selector(ttft.metric + "_count", ttft.matchers), short)
            if ttft.threshold_seconds is not None:
                exprs["ttft_good_per_second"] = _sum_rate(
                    promql.Selector(ttft.metric + "_bucket", ttft.good_matchers()), short)
        if itl.metric != vllm.INTER_TOKEN_LATENCY.name:
            exprs |= self._engine_gaps(short, long)
        return exprs

    def _engine_gaps(self, short: str, long: str) -> dict[str, str]:
        """The engine's own inter-token gaps (vLLM's histogram, on the engine's clock: a client
        that reads slowly does not move it), as the stage guard reads them: at most how long
        at the SLO's quantile over the short window, and at the spikes' quantile over the long
        one; the worst rank's, one sample per instance. Not asked where the SLI is that
        histogram already: its breach is the engine's."""
        gaps = vllm.INTER_TOKEN_LATENCY.name
        return {field: promql.max_by((LABEL_INSTANCE,), bucket_top(
                    quantile, gaps, self.scope, window, BY_RANK))
                for field, quantile, window in (
                    ("itl_engine_tail_seconds", self.itl_quantile, short),
                    ("itl_engine_spike_seconds", SPIKE_QUANTILE, long))}

    def stage_expressions(self) -> dict[str, str]:
        """Observation field → PromQL returning one sample per ``instance`` and ``stage``: each
        stage's median seconds per request over the short window and over the long one; with a
        TTFT SLO, the tail of each of the engine's stages before the first token (at most how
        long, :func:`engine_stage_quantile`) over the short window.

        The median, not the mean: a client sets its own requests' ``read`` (headers and body
        sent slowly) and ``stream_write`` (a stream read slowly), and a mean moves with a few
        such requests (3% of requests 30 s in ``read`` add 0.9 s to every request's mean), so
        an engine breach would look like the service's. A median moves only once most requests
        spend the time there. The engine's tails say whether the engine explains a breach at
        all: no client sets the time its request waits in the engine
        (:mod:`governor.controller.law.stage_guard`)."""
        exprs = {
            field: promql.histogram_quantile(STAGE_QUANTILE, service.REQUEST_STAGE.name,
                                             self.scope, promql.format_seconds(window),
                                             by=(*BY_STAGE, LABEL_LE))
            for field, window in (("stage_seconds", self.short_window_seconds),
                                  ("stage_seconds_long", self.long_window_seconds))
        }
        if self.ttft is not None:
            exprs["stage_tail_seconds"] = bucket_top(
                engine_stage_quantile(self.ttft_quantile), service.REQUEST_STAGE.name,
                (*self.scope, promql.one_of(LABEL_STAGE, ENGINE_STAGES)),
                promql.format_seconds(self.short_window_seconds), BY_STAGE)
        return exprs

    def verdict_expressions(self) -> dict[str, str]:
        """Observation field → PromQL returning one sample per ``instance`` and ``cause``: the
        verdict of the generated rules for the decode and TTFT SLOs over the short window (empty
        while they do not burn)."""
        out = {}
        # Each cause at its largest over the short window: a cause that held a few evaluations
        # ago still counts when one evaluation reads unknown (a GPU reading between samples).
        short = promql.format_seconds(self.short_window_seconds)
        for name, slo in (("itl_causes", self.itl_slo), ("ttft_causes", self.ttft_slo)):
            if slo and self.service:
                out[name] = promql.max_over_time(promql.Selector(verdict.CAUSE_SHARE.name, (
                    promql.eq(LABEL_SLO, slo), promql.eq(LABEL_SERVICE, self.service))), short)
        if out:
            # The GPU's conditions as soon as the rules record them, before any SLO burns in
            # the rules' window: a breach the controller sees first is still not cut for them.
            out["gpu_conditions"] = (
                f'{verdict.SLOWDOWN.name} or label_replace({verdict.FAULT.name}, '
                f'"{verdict.LABEL_CAUSE}", "{causes.GPU_FAULT.name}", "", "")')
        return out

    def targets(self) -> str:
        """The inference instances Prometheus scrapes (the only ones the controller will touch)."""
        return self._on(UP.name).render()


def engine_stage_quantile(quantile: float) -> float:
    """The quantile at which each of the engine's stages before the first token is read, so
    that their sum bounds the ``quantile`` of the time a request spends in all of them: with
    ``k`` stages, ``1 - (1 - quantile) / k``. At most ``(1 - quantile) / k`` of the requests
    pass each stage's reading, so at most ``1 - quantile`` pass any of them, and every other
    request spends at most the sum of the readings in the engine. A sum of each stage's own
    ``quantile`` would not bound it where the slow requests differ from stage to stage.

    >>> round(engine_stage_quantile(0.99), 6)
    0.996667
    """
    return 1.0 - (1.0 - quantile) / len(ENGINE_STAGES)


def bucket_top(quantile: float, metric: str, matchers: tuple[promql.Matcher, ...],
               window: str, by: tuple[str, ...]) -> str:
    """PromQL for the top edge of the bucket of a classic histogram that holds its
    ``quantile`` over ``window``, per ``by``: the most that quantile can be. The quantile
    itself (``histogram_quantile``) is interpolated inside that bucket, so it may read under
    the truth by up to the bucket's width (2.5x on the stages' 1-2-5 edges).

    Each bucket becomes 1 where it counts at least ``quantile`` of the observations, 0 where it
    counts fewer; the quantile 1 of that step is the top of the bucket it rises in (Prometheus
    interpolates the whole rank there). A quantile in the ``+Inf`` bucket reads as the highest
    edge, as ``histogram_quantile``'s does. Nothing where the window holds no observation.
    """
    buckets = promql.sum_by((LABEL_LE, *by), promql.rate(
        promql.Selector(metric + "_bucket", matchers), window))
    total = promql.sum_by(by, promql.rate(promql.Selector(metric + "_count", matchers), window))
    on = ", ".join(by)
    step = (f"{buckets}\n>= bool on ({on}) group_left\n"
            f"{promql.format_number(quantile)} * {total}")
    return f"histogram_quantile(1, {step})\nand on ({on})\n({total} > 0)"


def _quantile(quantile: float, sli: HistogramSli, window: str) -> str:
    # Grouped by instance and rank, then le.
    return promql.histogram_quantile(quantile, sli.metric, sli.matchers, window,
                                     by=(*BY_RANK, LABEL_LE))


def _sum_rate(counter: promql.Vector, window: str) -> str:
    return promql.sum_by(BY_RANK, promql.rate(counter, window))
