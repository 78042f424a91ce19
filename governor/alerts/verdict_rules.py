"""Why a latency SLO burns (``verdict.yml``): each cause's share of the breach, per target.

For each latency SLO on the inter-token or first-token path, on each inference target where it
burns (its error ratio over the short window is past its error budget), the rules split the
*excess* (the SLO's quantile less its threshold) among the causes of
:mod:`governor.contracts.causes`, in an order that puts what should never be there first:

1. **the GPU's condition** (throttled clocks, another process, a saturated link or diverging
   ranks): each stretches the engine's steps by a factor it is measured by (1 / the clock's
   share; the median step against the target's usual one), so it explains the part of the
   engine's latency that would go with it: ``latency * (1 - 1/factor)``. A GPU fault (an XID,
   an uncorrected ECC error, a lost GPU) in the window explains all of it.
2. **the service's own stages** (``governor serve`` only): reading the body, the text work, and
   writing to a slow client.
3. **the engine's scheduling**: the waiting queue (the KV cache's when the cache bounds it, the
   GPU's when its SMs and tensor pipes are saturated), the prefill spikes of mixed steps
   (batching: only where the tallest steps carry prefill and the step the engine makes now,
   its median over the last two scrapes, meets the SLO; on ``governor serve``'s own histogram,
   only where vLLM's own tail reaches the threshold too).
4. **saturation**: the rest of the step, where the GPU's SMs or DRAM are saturated by the
   engine's own work (and the whole step, where prefill saturates it while requests wait).

Each step takes what it explains out of what is left, so the shares of one breach add up to at
most 1, and a cause that would explain the breach only on a healthy GPU (the prefill spikes of a
throttled GPU) is not blamed for it. A cause counts when it explains at least
:data:`governor.contracts.causes.MATERIAL_SHARE` of the breach; with none, the verdict is
``unknown`` at 1. The result is :data:`governor.contracts.metrics.verdict.CAUSE_SHARE`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from governor.alerts.rules import RecordingRule, RuleFile, RuleGroup
from governor.alerts.slo_rules import good_rate, sli_matchers, slo_labels
from governor.alerts.verdict_evidence import path_of
from governor.alerts.verdict_inputs import (
    TARGET,
    Windows,
    engine_rules,
    gpu_rules,
    part_rules,
    per_target,
)
from governor.contracts import causes
from governor.contracts.causes import Latency
from governor.contracts.metrics import service, vllm
from governor.contracts.metrics import verdict as v
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.slo import LABEL_SERVICE, LABEL_SLO
from governor.contracts.promql import (
    Matcher,
    Selector,
    eq,
    format_number,
    histogram_quantile,
    ne,
    one_of,
    rate,
    sum_by,
)
from governor.generation.catalog import histogram_edges
from governor.generation.params import RenderParams
from governor.slo import class_thresholds
from governor.slo.class_thresholds import own_threshold_classes
from governor.slo.spec import SLO, LatencySLI, SloSpec

NAME = "verdict"
GROUP = "governor-verdict"
# A target's SLO burns only with this many events in the short window: a handful of slow
# requests on an idle target is no burn to explain.
MIN_EVENTS: Final = 20

def applies(spec: SloSpec) -> bool:
    return any(path_of(slo) is not None for slo in spec.slos)


class _Slo:
    """One SLO's recorded series, as selectors, and the helpers its rules share."""

    def __init__(self, spec: SloSpec, slo: SLO, w: Windows) -> None:
        assert isinstance(slo.sli, LatencySLI)
        self.spec, self.slo, self.sli, self.w = spec, slo, slo.sli, w
        self.labels = slo_labels(spec, slo)
        self.threshold = format_number(slo.sli.threshold_seconds)
        path = path_of(slo)
        assert path is not None
        self.path = path
        # The client's view (the service's own histograms) holds the service's stages; vLLM's
        # own starts at the engine and holds only the queue and the engine's steps.
        self.client_view = slo.sli.metric in {m.name for m in service.LATENCY_HISTOGRAMS}
        # vLLM stamps a request's arrival before its renderer templates and tokenizes the
        # prompt (vllm/renderers), so its own first-token time holds the text work too, which
        # vLLM >= 0.34 records as its render duration; before that release the part is absent.
        self.parts = ((v.PART_READ, v.PART_TEXT, v.PART_QUEUE, v.PART_PREFILL)
                      if self.client_view else (v.PART_TEXT, v.PART_QUEUE, v.PART_PREFILL))

    def on(self, metric: str, *extra: Matcher) -> str:
        """A per-SLO series of this SLO (``extra``: more matchers)."""
        matchers = (eq(LABEL_SLO, self.slo.name), eq(LABEL_SERVICE, self.spec.service), *extra)
        return Selector(metric, matchers).render()

    def rule(self, metric: str, expr: str, **extra: str) -> RecordingRule:
        return RecordingRule(metric, expr, {**self.labels, **extra})

    def share(self, cause: causes.Cause, amount: str) -> RecordingRule:
        """``cause``'s share: ``amount`` (seconds, per target) over the excess, 0-1, kept where
        it is material and the SLO burns."""
        return self.rule(v.CAUSE_SHARE.name, self._gated(
            f"clamp_max(\n(\n{amount}\n)\n/ on ({LABEL_INSTANCE}) group_left ()\n"
            f"{self.on(v.EXCESS.name)}, 1)"), cause=cause.name)

    def _gated(self, expr: str) -> str:
        return (f"(\n{expr}\n) >= {format_number(causes.MATERIAL_SHARE)}\n"
                f"and on ({LABEL_INSTANCE}) {self.on(v.BURN.name)} >= 1")

    def residual(self, step: str) -> str:
        """What is left of the excess after ``step``, with this SLO's labels only."""
        return f"max without ({v.LABEL_STEP}) ({self.on(v.RESIDUAL.name, eq(v.LABEL_STEP, step))})"


def _smaller(a: str, b: str) -> str:
    """The smaller of two vectors with the same labels, where both have a value."""
    return f"((({a}) <= ({b})) or (({b}) and ({a})))"


def _after(residual: str, taken: str, condition: str | None) -> str:
    """What is left of ``residual`` once ``taken`` (at most all of it) is explained, where
    ``condition`` holds for the target; ``residual`` itself elsewhere."""
    left = f"clamp_min(({residual}) - {_smaller(taken, residual)}, 0)"
    if condition is not None:
        left = f"({left} and on ({LABEL_INSTANCE}) ({condition}))"
    return f"{left}\nor ({residual})"


# ---- per target, whatever the SLO -------------------------------------------------------------

def _median() -> str:
    return v.ENGINE_ITL_MEDIAN.name


def _median_now() -> str:
    return v.ENGINE_ITL_MEDIAN_NOW.name


def _growth() -> str:
    """The target's median step against its usual one (≥ 1)."""
    return f"clamp_min({_median()} / {v.ENGINE_ITL_MEDIAN_BASELINE.name}, 1)"


def _tail_growth() -> str:
    """The target's tail step against its usual one, or the median's growth, whichever is
    larger (≥ 1). Every step slowed by a wait shows in the tail within seconds, while the
    median needs half the window's observations, and a slowed engine makes fewer of them."""
    tail = f"clamp_min({v.ENGINE_ITL_TAIL.name} / {v.ENGINE_ITL_TAIL_BASELINE.name}, 1)"
    return f"({tail} >= {_growth()}\nor on ({LABEL_INSTANCE}) {_growth()})"


def slowdown_rules() -> tuple[RecordingRule, ...]:
    """How much slower each GPU condition makes a target's steps, where it holds."""
    deficit = f"max by ({v.LABEL_NODE}) ({v.GPU_CLOCK_DEFICIT.name})"
    cotenant = f"max by ({v.LABEL_NODE}) ({v.GPU_COTENANT.name})"
    link = f"max by ({v.LABEL_NODE}) ({v.GPU_LINK.name})"
    throttled = (f"1 / (1 - ({per_target(deficit)}))\n"
                 f"and on ({LABEL_INSTANCE}) ({per_target(deficit)} >= "
                 f"{format_number(causes.CLOCK_DEFICIT)})")
    shared = (f"((1 / (1 - {per_target(cotenant)})) >= {_growth()}\n"
              f"or on ({LABEL_INSTANCE}) {_growth()})\n"
              f"and on ({LABEL_INSTANCE}) {per_target(cotenant)}")
    saturated_link = f"{_tail_growth()}\nand on ({LABEL_INSTANCE}) ({per_target(link)} >= " \
                     f"{format_number(causes.LINK_SATURATED)})"
    spread = f"{v.RANK_SPREAD.name} >= {format_number(causes.RANK_SPREAD)}"
    interconnect = f"({spread})\nor on ({LABEL_INSTANCE}) ({saturated_link})"
    slowdown = format_number(causes.SLOWDOWN)
    return (
        RecordingRule(v.SLOWDOWN.name, throttled, {v.LABEL_CAUSE: causes.GPU_THROTTLED.name}),
        RecordingRule(v.SLOWDOWN.name, f"({shared}) >= {slowdown}",
                      {v.LABEL_CAUSE: causes.GPU_SHARED.name}),
        RecordingRule(v.SLOWDOWN.name, f"({interconnect}) >= {slowdown}",
                      {v.LABEL_CAUSE: causes.INTERCONNECT.name}),
        RecordingRule(v.FAULT.name, f"{per_target(v.GPU_FAULT.name)} > 0"),
    )


def _factor() -> str:
    """All GPU conditions' slowdowns of a target multiplied (1 without any)."""
    return (f"(exp(sum by ({LABEL_INSTANCE}) (ln({v.SLOWDOWN.name})))"
            f" or on ({LABEL_INSTANCE}) ({_median()} * 0 + 1))")


def _saturated(compute: bool) -> str:
    sm = per_target(v.GPU_SM_ACTIVE.name)
    if compute:
        return (f"{sm} >= {format_number(causes.SM_SATURATED)}\nand on ({LABEL_INSTANCE}) "
                f"{per_target(v.GPU_TENSOR_ACTIVE.name)} >= "
                f"{format_number(causes.TENSOR_BUSY)}")
    return (f"{per_target(v.GPU_DRAM_ACTIVE.name)} >= {format_number(causes.DRAM_SATURATED)}\n"
            f"unless on ({LABEL_INSTANCE}) ({_saturated(True)})")


def _tall_steps() -> str:
    return (f"{v.STEP_TOKENS.name} > {format_number(causes.TALL_STEP_PER_RUNNING)} * "
            f"{v.RUNNING.name} + {causes.TALL_STEP_TOKENS}")


def _demand_saturated() -> str:
    """The GPU's SMs and tensor pipes saturated by the engine while requests wait: prefill
    demand past what the GPU computes. Every step then carries a chunk; a smaller budget would
    only move the wait to the first token."""
    return (f"({_saturated(True)})\nand on ({LABEL_INSTANCE}) "
            f"({v.ENGINE_WAITING.name} >= {format_number(causes.WAITING_SATURATED)})")


def _preempting() -> str:
    return f"{v.PREEMPTIONS.name} > 0"


def _cache_bound() -> str:
    """The engine preempts, or its KV cache was full in the window: a waiting request waits for
    blocks, not for a sequence slot."""
    return (f"({_preempting()})\nor on ({LABEL_INSTANCE}) "
            f"({v.KV_USAGE.name} >= {format_number(causes.KV_FULL)})")


# ---- one SLO -----------------------------------------------------------------------------------

def _burn(s: _Slo) -> str:
    """The SLO's error ratio per target over the short window, over its error budget."""
    sli, spec, window = s.sli, s.spec, s.w.short
    count = Selector(sli.metric + "_count", sli_matchers(spec, sli))
    total = sum_by(TARGET, rate(count, window))
    if class_thresholds.applies(spec, s.slo) and \
            len(class_thresholds.groups(spec, s.slo)) > 1:
        terms = [f"({good_rate(spec, sli, g.matchers, g.threshold, window, TARGET)} or "
                 f"{total} * 0)" for g in class_thresholds.groups(spec, s.slo)]
        good = "(" + " + ".join(terms) + ")"
    else:
        good = good_rate(spec, sli, (), sli.threshold_seconds, window, TARGET)
    events = f"{total} * {s.w.short_seconds} >= {MIN_EVENTS}"
    return (f"(1 - {good} / {total}) / {format_number(s.slo.error_budget)}\n"
            f"and on ({LABEL_INSTANCE}) ({events})")


def _common(s: _Slo) -> tuple[RecordingRule, ...]:
    matchers = (*sli_matchers(s.spec, s.sli), *own_threshold_classes(s.spec, s.slo))
    quantile = histogram_quantile(s.slo.objective, s.sli.metric, matchers, s.w.short, TARGET)
    return (
        s.rule(v.BURN.name, _burn(s)),
        s.rule(v.CLIENT_QUANTILE.name, quantile),
        s.rule(v.EXCESS.name, f"clamp_min({s.on(v.CLIENT_QUANTILE.name)} - {s.threshold}, "
                              f"{format_number(s.sli.threshold_seconds / 100)})"),
    )


def _gpu_shares(s: _Slo, engine: str) -> tuple[RecordingRule, ...]:
    """Each GPU condition's share, of ``engine`` (the seconds of the latency the engine's steps
    take), and what is left once all of them are taken out."""
    shares = tuple(
        s.share(cause, f"(1 - 1 / {Selector(v.SLOWDOWN.name, (eq(v.LABEL_CAUSE, cause.name),))})"
                       f"\n* on ({LABEL_INSTANCE}) group_left ()\n({engine})")
        for cause in (causes.GPU_THROTTLED, causes.GPU_SHARED, causes.INTERCONNECT))
    fault = s.rule(v.CAUSE_SHARE.name, s._gated(
        f"{v.FAULT.name} * 0 + 1\nand on ({LABEL_INSTANCE}) {s.on(v.EXCESS.name)}"),
        cause=causes.GPU_FAULT.name)
    explained = f"({engine}) * on ({LABEL_INSTANCE}) group_left () (1 - 1 / {_factor()})"
    # A fault explains all of it: nothing is left for the causes after it.
    faulted = f"({s.on(v.EXCESS.name)} * 0\nand on ({LABEL_INSTANCE}) {v.FAULT.name})"
    left = s.rule(v.RESIDUAL.name,
                  f"{faulted}\nor ({_after(s.on(v.EXCESS.name), explained, None)})",
                  step=v.STEP_GPU)
    return (*shares, fault, left)


def itl_rules(s: _Slo) -> tuple[RecordingRule, ...]:
    quantile = histogram_quantile(s.slo.objective, vllm.INTER_TOKEN_LATENCY.name,
                                  s.spec.targets.inference.matchers(), s.w.short, TARGET)
    engine = s.on(v.ENGINE_ITL_QUANTILE.name)
    # The step now, not the window's median: a window that began before every step carried a
    # chunk still has a median of decode steps, and would call a burst past the GPU's prefill
    # spikes over a healthy step.
    per_slo_median = f"({engine} * 0 + on ({LABEL_INSTANCE}) group_left () {_median_now()})"
    factor = f"on ({LABEL_INSTANCE}) group_left () {_factor()}"
    spikes = f"clamp_min({engine} - {per_slo_median}, 0) / {factor}"
    steady = f"{per_slo_median} / {factor}"
    rules: list[RecordingRule] = [s.rule(v.ENGINE_ITL_QUANTILE.name, quantile),
                                  *_gpu_shares(s, engine)]
    left = s.residual(v.STEP_GPU)
    if s.client_view:
        writing = f"clamp_min({s.on(v.CLIENT_QUANTILE.name)} - {engine}, 0)"
        slow_reader = (f"{v.STREAM_WRITE_SHARE.name} >= "
                       f"{format_number(causes.MATERIAL_SHARE)}")
        rules.append(s.share(causes.CLIENT_STREAM, f"{_smaller(writing, left)}\n"
                             f"and on ({LABEL_INSTANCE}) ({slow_reader})"))
        rules.append(s.rule(v.RESIDUAL.name, _after(left, writing, slow_reader),
                            step=v.STEP_SERVICE))
        left = s.residual(v.STEP_SERVICE)
    # Spikes are to blame only while the steady step meets the SLO and most gaps do: past it,
    # many gaps miss with or without them, and fewer preemptions or a smaller budget would not
    # end the breach (the steady step's cause, below, takes it). The median alone is not enough:
    # on vLLM's coarse buckets one interpolated under the threshold hides a third of gaps over.
    steady_meets = (f"{_median_now()} < {s.threshold}\nand on ({LABEL_INSTANCE}) "
                    f"({s.on(v.BURN.name)} * {format_number(s.slo.error_budget)} <= "
                    f"{format_number(causes.SPIKES_MISS_AT_MOST)})")
    # Prefill spikes over a steady step that meets the SLO are batching's, however busy the GPU:
    # a smaller budget is what shortens them. A demand past what the GPU prefills puts a chunk
    # in every step, and then the step itself misses (the steady step's cause takes it, below);
    # the first-token breach of such a queue is judged on its own SLO.
    # In the client's view, the engine's spikes explain a breach only where the engine's own tail
    # reaches the threshold: below it, the slow gaps were made between the engine and the
    # client (a service that fell behind its streams), and a smaller budget would not end them.
    spikes_miss = steady_meets if not s.client_view else \
        f"{steady_meets}\nand on ({LABEL_INSTANCE}) ({engine} >= {_engine_floor(s)})"
    batching = f"({_tall_steps()})\nand on ({LABEL_INSTANCE}) ({spikes_miss})"
    preempting = f"({_preempting()})\nand on ({LABEL_INSTANCE}) ({spikes_miss})"
    for cause, condition, step in ((causes.KV_CACHE, preempting, v.STEP_KV),
                                   (causes.BATCHING, batching, v.STEP_BATCHING)):
        rules.append(s.share(cause, f"{_smaller(spikes, left)}\n"
                                    f"and on ({LABEL_INSTANCE}) ({condition})"))
        rules.append(s.rule(v.RESIDUAL.name, _after(left, spikes, condition), step=step))
        left = s.residual(step)
    whole = f"{engine} / {factor}"
    compute = f"(({whole})\nand on ({LABEL_INSTANCE}) ({_demand_saturated()}))\nor ({steady})"
    rules += [s.share(causes.GPU_COMPUTE_BOUND, _saturation(compute, left, True)),
              s.share(causes.GPU_MEMORY_BOUND, _saturation(steady, left, False))]
    return tuple(rules)


def _engine_floor(s: _Slo) -> str:
    """The least vLLM's inter-token quantile reads where its true value is past the SLO's
    threshold: the edge below the threshold in vLLM's buckets (it interpolates within a bucket,
    so a tail just past the threshold can read as low as the bucket's lower edge)."""
    edges = histogram_edges(s.spec)[vllm.INTER_TOKEN_LATENCY.name]
    threshold = s.sli.threshold_seconds
    return format_number(max((edge for edge in edges if edge < threshold), default=0.0))


def _saturation(amount: str, left: str, compute: bool) -> str:
    """``amount`` of what is left, where the GPU is saturated by the engine's own work."""
    return f"{_smaller(amount, left)}\nand on ({LABEL_INSTANCE}) ({_saturated(compute)})"


def _part(s: _Slo, part: str) -> str:
    """A part of the first-token path, as seconds of the SLO's quantile: its share of the
    parts' tails times the quantile."""
    parts = Selector(v.TTFT_PART.name, (one_of(v.LABEL_PART, s.parts),))
    one = Selector(v.TTFT_PART.name, (eq(v.LABEL_PART, part),))
    return (f"(sum by ({LABEL_INSTANCE}) ({one}) / sum by ({LABEL_INSTANCE}) ({parts})\n"
            f"* on ({LABEL_INSTANCE}) group_right () {s.on(v.CLIENT_QUANTILE.name)})")


def ttft_rules(s: _Slo) -> tuple[RecordingRule, ...]:
    prefill = _part(s, v.PART_PREFILL)
    rules: list[RecordingRule] = list(_gpu_shares(s, prefill))
    left = s.residual(v.STEP_GPU)
    queue = _part(s, v.PART_QUEUE)
    steps: list[tuple[causes.Cause, str, str | None, str]] = []
    if s.client_view:
        steps += [(causes.REQUEST_READ, _part(s, v.PART_READ), None, v.STEP_READ)]
    steps += [(causes.TOKENIZER, _part(s, v.PART_TEXT), None, v.STEP_TEXT)]
    factor = f"on ({LABEL_INSTANCE}) group_left () {_factor()}"
    # The queue is the KV cache's where the cache bounds it, the GPU's where its SMs and tensor
    # pipes are saturated (with the prefill's own time), else the queue's own.
    saturated = _saturated(True)
    steps += [(causes.KV_CACHE, queue, _cache_bound(), v.STEP_KV),
              (causes.GPU_COMPUTE_BOUND, f"({queue} + {prefill} / {factor})", saturated,
               v.STEP_SATURATION),
              (causes.QUEUE, queue, f"{v.RUNNING.name} unless on ({LABEL_INSTANCE}) "
                                    f"({_cache_bound()})\nunless on ({LABEL_INSTANCE}) "
                                    f"({saturated})", v.STEP_QUEUE)]
    for cause, amount, condition, step in steps:
        gated = amount if condition is None else \
            f"{amount}\nand on ({LABEL_INSTANCE}) ({condition})"
        rules.append(s.share(cause, _smaller(gated, left)))
        rules.append(s.rule(v.RESIDUAL.name, _after(left, amount, condition), step=step))
        left = s.residual(step)
    return tuple(rules)


def unknown_rule(s: _Slo) -> RecordingRule:
    """1 where the SLO burns on a target and no cause explains a material share of it."""
    known = s.on(v.CAUSE_SHARE.name, ne(v.LABEL_CAUSE, causes.UNKNOWN.name))
    burning = f"{s.on(v.BURN.name)} >= 1"
    return s.rule(v.CAUSE_SHARE.name,
                  f"(\n{burning}\nunless on ({LABEL_INSTANCE}) {known}\n) > bool 0",
                  cause=causes.UNKNOWN.name)


def slo_rules(spec: SloSpec, slo: SLO, w: Windows) -> tuple[RecordingRule, ...]:
    s = _Slo(spec, slo, w)
    specific = itl_rules(s) if s.path is Latency.ITL else ttft_rules(s)
    return (*_common(s), *specific, unknown_rule(s))


def verdict_rule_file(spec: SloSpec, params: RenderParams) -> RuleFile:
    """One group: Prometheus evaluates a group's rules in order at one timestamp, each seeing
    the ones before it, while separate groups run on their own schedules. Split, an SLO's shares
    read a fresh latency beside GPU conditions one evaluation old: at a saturated link's onset
    the steps' growth went to ``gpu_memory_bound`` for a poll or two before the link's
    slowdown was recorded."""
    w = Windows.of(params)
    inputs = (*engine_rules(spec, w), *part_rules(spec, w), *gpu_rules(spec, w),
              *slowdown_rules())
    slos: Sequence[SLO] = [slo for slo in spec.slos if path_of(slo) is not None]
    return RuleFile(NAME, (RuleGroup(GROUP, (*inputs, *(rule for slo in slos
                                                        for rule in slo_rules(spec, slo, w)))),))
