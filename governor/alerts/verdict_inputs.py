"""What the verdict reads, recorded once per target or per GPU placement, whatever the fleet.

The attribution (:mod:`governor.alerts.verdict_rules`) reads only the ``verdict:*`` series
recorded here, so one set of rules serves every fleet: Governor's service or stock vLLM (vLLM's
own ``vllm:*`` series either way; the service's stages only where it runs), Governor's GPU
exporter or NVIDIA's dcgm-exporter (the same quantities under each release's names, in one
unit). A GPU is tied to the inference targets that run beside it by its *node*: the ``node``
label where the scrape configuration sets one (the generated Kubernetes monitors do), else the
host part of ``instance``, so a GPU exporter and a server scraped on one host meet::

    >>> print(placed('gpu_up{job="gpu"}'))
    label_replace(label_join(gpu_up{job="gpu"}, "verdict_placement", ";", "node", "instance"), \
"node", "$1$2", "verdict_placement", "^(?:([^;]+);.*|;(.*):[0-9]+)$")

Windows: the short one is the fast alert's (the verdict must be there within minutes of a
fault's onset); the long one, thirty times longer, holds the target's usual state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from governor.alerts.rules import RecordingRule
from governor.contracts import causes
from governor.contracts.declaration import Metric
from governor.contracts.metrics import dcgm, gpu, service, vllm
from governor.contracts.metrics import verdict as v
from governor.contracts.metrics.scrape import LABEL_INSTANCE, UP
from governor.contracts.promql import (
    Matcher,
    Selector,
    format_duration,
    format_number,
    histogram_quantile,
    max_over_time,
    one_of,
    quote,
    rate,
    sum_by,
)
from governor.contracts.stages import Stage
from governor.generation.params import RenderParams
from governor.slo.spec import SloSpec

TARGET: Final = (LABEL_INSTANCE,)
NODE: Final = (v.LABEL_NODE,)
_PLACEMENT: Final = "verdict_placement"
# The long window is this many short ones, and a fault is remembered for this many.
LONG_FACTOR: Final = 30
FAULT_FACTOR: Final = 5
# The tail each part of the first-token path is read at.
PART_QUANTILE: Final = 0.99
_THROTTLE_REASONS: Final = (gpu.REASON_SW_POWER_CAP, gpu.REASON_HW_SLOWDOWN,
                            gpu.REASON_SYNC_BOOST, gpu.REASON_SW_THERMAL, gpu.REASON_HW_THERMAL,
                            gpu.REASON_HW_POWER_BRAKE)
# An enforced power limit at least this share of the board's default is the board's own.
OWN_POWER_LIMIT_SHARE: Final = 0.99
_TEXT_WORK: Final = (Stage.PARSE, Stage.RENDER, Stage.TOKENIZE)
_QUEUE_STAGES: Final = (Stage.ADMISSION, Stage.ENGINE_QUEUE)


@dataclass(frozen=True)
class Windows:
    """The verdict's two windows, in seconds."""

    short_seconds: int
    long_seconds: int
    scrape_seconds: int = 15

    @classmethod
    def of(cls, params: RenderParams) -> Windows:
        return cls(params.fast_window_seconds, LONG_FACTOR * params.fast_window_seconds,
                   params.scrape_interval_seconds)

    @property
    def recent(self) -> str:
        """The last two scrapes (at most the short window): a reading held that long is held,
        one sample is a moment."""
        return format_duration(min(2 * self.scrape_seconds, self.short_seconds))

    @property
    def short(self) -> str:
        return format_duration(self.short_seconds)

    @property
    def long(self) -> str:
        return format_duration(self.long_seconds)

    @property
    def fault(self) -> str:
        """How far back a GPU fault still explains a breach: an XID's stalls and recovery
        outlast the window it was raised in (dcgm-exporter shows only the last code, new once)."""
        return format_duration(FAULT_FACTOR * self.short_seconds)


def placed(expr: str) -> str:
    """``expr`` with its ``node``: the series' own, else the host part of its ``instance``."""
    joined = f'label_join({expr}, "{_PLACEMENT}", ";", "{v.LABEL_NODE}", "{LABEL_INSTANCE}")'
    return (f'label_replace({joined}, "{v.LABEL_NODE}", "$1$2", "{_PLACEMENT}", '
            '"^(?:([^;]+);.*|;(.*):[0-9]+)$")')


def constant_label(expr: str, label: str, value: str) -> str:
    """``expr`` with ``label`` set to ``value`` on every series."""
    return f'label_replace({expr}, {quote(label)}, {quote(value)}, "", "")'


def _rule(metric: Metric, expr: str) -> RecordingRule:
    return RecordingRule(metric.name, expr)


# ---- the engine: vLLM's own series, from vLLM or the simulated engine ----------------------------

def engine_rules(spec: SloSpec, w: Windows) -> tuple[RecordingRule, ...]:
    scope = spec.targets.inference.matchers()

    def on(metric: str) -> Selector:
        return Selector(metric, scope)

    itl = vllm.INTER_TOKEN_LATENCY.name
    median = histogram_quantile(0.5, itl, scope, w.short, TARGET)
    by_rank = histogram_quantile(0.5, itl, scope, w.short, (LABEL_INSTANCE, vllm.LABEL_ENGINE))
    ranks = f"count by ({LABEL_INSTANCE}) ({by_rank}) > 1"
    engine_waiting = sum_by(TARGET, f"avg_over_time({on(vllm.NUM_REQUESTS_WAITING.name)}"
                                    f"[{w.short}])")
    waiting = engine_waiting
    if not spec.stock_vllm:
        queued = sum_by(TARGET, f"avg_over_time({on(service.QUEUE_DEPTH.name)}[{w.short}])")
        waiting = f"{waiting}\n+ on ({LABEL_INSTANCE}) group_left ()\n({queued} or {waiting} * 0)"
    return (
        _rule(v.TARGET_NODE, f"group by ({LABEL_INSTANCE}, {v.LABEL_NODE}) "
                             f"({placed(on(UP.name).render())})"),
        _rule(v.ENGINE_ITL_MEDIAN, median),
        # The step now: when every step starts carrying a prefill chunk (a burst past what the
        # GPU prefills) or every decode slows (a growing batch), the window's median lags by
        # half the window, while most of the last two scrapes' gaps are already the new step.
        _rule(v.ENGINE_ITL_MEDIAN_NOW,
              f"{histogram_quantile(0.5, itl, scope, w.recent, TARGET)}\n"
              f"or {v.ENGINE_ITL_MEDIAN.name}"),
        _rule(v.ENGINE_ITL_MEDIAN_BASELINE,
              f"quantile_over_time(0.1, {v.ENGINE_ITL_MEDIAN.name}[{w.long}:])"),
        _rule(v.ENGINE_ITL_TAIL, histogram_quantile(0.99, itl, scope, w.short, TARGET)),
        _rule(v.ENGINE_ITL_TAIL_BASELINE,
              f"quantile_over_time(0.1, {v.ENGINE_ITL_TAIL.name}[{w.long}:])"),
        _rule(v.STEP_TOKENS, histogram_quantile(0.999, vllm.ITERATION_TOKENS.name, scope, w.short,
                                                TARGET)),
        _rule(v.RUNNING, sum_by(TARGET, f"max_over_time({on(vllm.NUM_REQUESTS_RUNNING.name)}"
                                        f"[{w.short}])")),
        _rule(v.PREEMPTIONS, sum_by(TARGET, rate(on(vllm.NUM_PREEMPTIONS.total), w.short))),
        _rule(v.KV_USAGE, f"max by ({LABEL_INSTANCE}) "
                          f"({max_over_time(on(vllm.KV_CACHE_USAGE.name), w.short)})"),
        _rule(v.ENGINE_WAITING, engine_waiting),
        _rule(v.WAITING, waiting),
        _rule(v.RANK_SPREAD, f"(max by ({LABEL_INSTANCE}) ({by_rank})\n/\n"
                             f"min by ({LABEL_INSTANCE}) ({by_rank}))\nand on ({LABEL_INSTANCE})"
                             f" ({ranks})"),
    )


def _mean(metric: str, matchers: tuple[Matcher, ...], window: str, by: tuple[str, ...]) -> str:
    return (f"{sum_by(by, rate(Selector(metric + '_sum', matchers), window))}\n/\n"
            f"{sum_by(by, rate(Selector(metric + '_count', matchers), window))}")


def _stage_sum(metric: Metric, stages: tuple[Stage, ...]) -> str:
    selector = Selector(metric.name, (one_of(service.LABEL_STAGE, [s.value for s in stages]),))
    return sum_by(TARGET, selector)


def part_rules(spec: SloSpec, w: Windows) -> tuple[RecordingRule, ...]:
    """Where a first token's time goes, in four parts, each at its own tail (a first token that
    misses its SLO is in the tail of the part that held it), and how much of the time between
    tokens is writing to the client: governor serve's stages, or vLLM's own timings on stock
    vLLM."""
    scope = spec.targets.inference.matchers()

    def tail(metric: str, by: tuple[str, ...] = TARGET) -> str:
        return histogram_quantile(PART_QUANTILE, metric, scope, w.short, by)

    if spec.stock_vllm:
        parts = {
            v.PART_TEXT: tail(vllm.REQUEST_RENDER_DURATION.name),
            v.PART_QUEUE: tail(vllm.REQUEST_QUEUE_TIME.name),
            v.PART_PREFILL: tail(vllm.REQUEST_PREFILL_TIME.name),
        }
        return tuple(RecordingRule(v.TTFT_PART.name, expr, {v.LABEL_PART: part})
                     for part, expr in parts.items())
    by_stage = (LABEL_INSTANCE, service.LABEL_STAGE)
    read, work, turn = (_stage_sum(v.STAGE_TAIL, stages)
                        for stages in ((Stage.READ,), _TEXT_WORK, (Stage.TEXT_QUEUE,)))
    # The wait for a text thread, or a large body's turn (an unknown length's too), is made by
    # the requests holding them, for as long as their bodies arrive and they are prepared: it
    # goes to reading and to the text work as the holders' time does. Whole to the text work,
    # slow bodies' turns read as a slow tokenizer (a drill's chunked bodies at 128 B every
    # 0.2 s: a p99 of 4.5 s waiting for the one turn, 1.9 s reading).
    reading_share = f"({read}\n/ clamp_min({read} + {work}, 1e-9))"
    governor_parts = {
        v.PART_READ: f"{read}\n+ {turn} * {reading_share}",
        v.PART_TEXT: f"{work}\n+ {turn} * (1 - {reading_share})",
        v.PART_QUEUE: _stage_sum(v.STAGE_TAIL, _QUEUE_STAGES),
        v.PART_PREFILL: _stage_sum(v.STAGE_TAIL, (Stage.PREFILL,)),
    }
    # Counted as the writes pass, over the client's time between tokens (the histogram's sum):
    # a stream's stages are observed only when it ends, minutes late for a slow reader's.
    write = sum_by(TARGET, rate(Selector(service.STREAM_WRITE_SECONDS.total, scope), w.short))
    between = sum_by(TARGET, rate(Selector(service.INTER_TOKEN_LATENCY.name + "_sum", scope),
                                  w.short))
    return (
        _rule(v.STAGE, _mean(service.REQUEST_STAGE.name, scope, w.short, by_stage)),
        _rule(v.STAGE_TAIL, tail(service.REQUEST_STAGE.name, by_stage)),
        *(RecordingRule(v.TTFT_PART.name, expr, {v.LABEL_PART: part})
          for part, expr in governor_parts.items()),
        _rule(v.STREAM_WRITE_SHARE, f"clamp_max(\n{write}\n/\n{between}, 1)"),
    )


# ---- the GPUs: Governor's exporter or dcgm-exporter, per node --------------------------------

@dataclass(frozen=True)
class _GpuSeries:
    """The GPU quantities the verdict reads, as PromQL per GPU (labels of the exporter's own)."""

    sm_active: str
    tensor_active: str
    dram_active: str
    # The highest SM clock over the last two scrapes: a clock held down stays down, while a
    # power cap the engine's own prefill bursts reach lets it back up between them.
    sm_clock: str
    sm_clock_high: str  # the highest SM clock over the long window
    reasons: str  # 1 per (GPU, reason) held: a ``reason`` label
    memory_used: str  # bytes of the GPU's memory in use
    second_process: str | None  # 1 per GPU with two processes holding memory, where known
    # The SM share of every process but the one holding the most memory (the engine), where
    # the exporter reads per-process utilisation.
    cotenant_sm: str | None
    link: str  # the busiest link's share of its capacity
    faults: str  # fault events per GPU over the short window


def _busiest(w: Windows) -> Callable[[Selector], str]:
    """An activity gauge at its highest over the short window: a tail latency is made at the
    GPU's busiest moments, and one exporter sample is a second of them."""
    return lambda selector: max_over_time(selector, w.short)


def _governor_gpus(spec: SloSpec, w: Windows) -> _GpuSeries:
    scope = spec.targets.gpu.matchers()
    busiest = _busiest(w)

    def on(metric: str, *extra: Matcher) -> Selector:
        return Selector(metric, (*scope, *extra))

    sm_clock = on(gpu.CLOCK.name, Matcher(gpu.LABEL_CLOCK, "=", "sm"))
    used = on(gpu.MEMORY_USED.name)
    held = f"{on(gpu.PROCESS_MEMORY_USED.name)} > {format_number(causes.PROCESS_MEMORY_BYTES)}"
    per_gpu = f"{LABEL_INSTANCE}, {gpu.LABEL_GPU}"
    pcie = (f"({on(gpu.PCIE_TRANSMIT_RATE.name)} + {on(gpu.PCIE_RECEIVE_RATE.name)}) / "
            f"{format_number(2 * causes.PCIE_BYTES_PER_SECOND)}")
    nvlink = (f"({on(gpu.NVLINK_TRANSMIT_RATE.name)} + {on(gpu.NVLINK_RECEIVE_RATE.name)}) / "
              f"{format_number(2 * causes.NVLINK_BYTES_PER_SECOND)}")
    xid, ecc = on(gpu.XID_ERRORS.total), on(gpu.ECC_UNCORRECTED_ERRORS.total)
    # Each branch keeps only its faults: a counter that did not rise reads 0, and a 0 on the
    # left of ``or`` would hide the same GPU's fault on the right (an XID whose series is new:
    # ``increase`` misses its first count).
    faults = (f"sum by ({per_gpu}) (increase({xid}[{w.fault}])) > 0\n"
              f"or sum by ({per_gpu}) ({xid} unless {xid} offset {w.fault}) > 0\n"
              f"or sum by ({per_gpu}) (increase({ecc}[{w.fault}]) > 0)\n"
              f"or count by ({per_gpu}) ({on(gpu.UP.name)} == 0)")
    return _GpuSeries(
        sm_active=f"({busiest(on(gpu.SM_ACTIVE.name))} or "
                  f"{busiest(on(gpu.UTILIZATION.name))})",
        tensor_active=busiest(on(gpu.TENSOR_ACTIVE.name)),
        dram_active=busiest(on(gpu.DRAM_BANDWIDTH_UTILIZATION.name)),
        sm_clock=f"max by ({per_gpu}) ({max_over_time(sm_clock, w.recent)})",
        sm_clock_high=f"max by ({per_gpu}) ({max_over_time(sm_clock, w.long)})",
        reasons=_governor_reasons(on, per_gpu),
        memory_used=used.render(),
        second_process=f"count by ({per_gpu}) ({held}) > 1",
        cotenant_sm=(f"sum by ({per_gpu}) ({on(gpu.PROCESS_SM_UTILIZATION.name)}\n"
                     f"unless on ({per_gpu}, {gpu.LABEL_PID}) "
                     f"topk by ({per_gpu}) (1, {on(gpu.PROCESS_MEMORY_USED.name)}))"),
        link=f"({pcie}) or ({nvlink})",
        faults=faults,
    )


def _governor_reasons(on: Callable[..., Selector], per_gpu: str) -> str:
    """1 per (GPU, reason) that holds its clocks down. A power cap counts only where the
    enforced limit is below the board's own: at the board's own limit, the cap is the engine's
    work drawing all the board may (on an H100 at 700 W, every long prefill), which is saturation
    and what a smaller budget relieves; below it, someone lowered the limit, and no batching
    limit gives the clock back. An exporter without the default limit counts every cap."""
    others = tuple(r for r in _THROTTLE_REASONS if r != gpu.REASON_SW_POWER_CAP)
    active = gpu.CLOCK_EVENT_ACTIVE.name
    held = (f"max by ({per_gpu}, {gpu.LABEL_REASON}) "
            f"({on(active, one_of(gpu.LABEL_REASON, others))} == 1)")
    cap = (f"max by ({per_gpu}, {gpu.LABEL_REASON}) "
           f"({on(active, Matcher(gpu.LABEL_REASON, '=', gpu.REASON_SW_POWER_CAP))} == 1)")
    own = (f"max by ({per_gpu}) ({on(gpu.POWER_LIMIT.name)})\n"
           f">= {format_number(OWN_POWER_LIMIT_SHARE)} * "
           f"max by ({per_gpu}) ({on(gpu.POWER_DEFAULT_LIMIT.name)})")
    return f"{held}\nor\n({cap}\nunless on ({per_gpu})\n({own}))"


def _dcgm_gpus(spec: SloSpec, w: Windows) -> _GpuSeries:
    busiest = _busiest(w)
    on = spec.targets.gpu.matchers()
    per_gpu = f"{LABEL_INSTANCE}, {dcgm.LABEL_GPU}"
    bitmask = dcgm.CLOCK_EVENT_REASONS.base(on)
    reasons = "\nor\n".join(
        constant_label(f"max by ({per_gpu}) ({dcgm.any_reason(bitmask, [reason])} == 1)",
                       gpu.LABEL_REASON, reason)
        for reason in _THROTTLE_REASONS)
    used = dcgm.FB_USED.base(on)
    codes = dcgm.XID.base(on)
    before = dcgm.XID.base(on, lambda s: f"{s} offset {w.fault}")
    (ecc,) = dcgm.ECC_UNCORRECTED.fields
    pcie = (f"({dcgm.PCIE_TX.base(on)} + {dcgm.PCIE_RX.base(on)}) / "
            f"{format_number(2 * causes.PCIE_BYTES_PER_SECOND)}")
    return _GpuSeries(
        sm_active=f"({dcgm.SM_ACTIVE.base(on, busiest)} or {dcgm.GPU_UTIL.base(on, busiest)})",
        tensor_active=dcgm.TENSOR_ACTIVE.base(on, busiest),
        dram_active=dcgm.DRAM_ACTIVE.base(on, busiest),
        sm_clock=f"max by ({per_gpu}) "
                 f"({dcgm.SM_CLOCK.base(on, lambda s: max_over_time(s, w.recent))})",
        sm_clock_high=f"max by ({per_gpu}) "
                      f"({dcgm.SM_CLOCK.base(on, lambda s: max_over_time(s, w.long))})",
        reasons=reasons,
        memory_used=used,
        second_process=None,  # DCGM lists no processes
        cotenant_sm=None,
        link=pcie,
        faults=(f"count by ({per_gpu}) ({codes} > 0 unless {before} == {codes})\n"
                f"or sum by ({per_gpu}) (increase({Selector(ecc.name, on)}[{w.fault}]) > 0)"),
    )


def gpu_rules(spec: SloSpec, w: Windows) -> tuple[RecordingRule, ...]:
    g = _dcgm_gpus(spec, w) if spec.targets.gpu.dcgm else _governor_gpus(spec, w)
    per_gpu_labels = (LABEL_INSTANCE, dcgm.LABEL_GPU)  # both exporters name the index "gpu"
    on_gpu = f"on ({', '.join(per_gpu_labels)})"

    def node_max(expr: str, by: tuple[str, ...] = NODE) -> str:
        return f"max by ({', '.join(by)}) ({placed(expr)})"

    deficit = (f"({g.reasons})\n* {on_gpu} group_left ()\n"
               f"(1 - {g.sm_clock} / {g.sm_clock_high})")
    # The GPU's memory grown past its least over the long window *while the engine answered*:
    # vLLM allocates its own at start, before it answers, so an exporter that saw the start
    # does not read the engine as a co-tenant.
    engine_up = placed(f"{Selector(UP.name, spec.targets.inference.matchers())} == 1")
    used = placed(g.memory_used)
    least = f"min_over_time(({used}\nand on ({v.LABEL_NODE}) {engine_up})[{w.long}:])"
    grown = f"({used} - {least}) > {format_number(causes.COTENANT_MEMORY_BYTES)}"
    present = f"max by ({v.LABEL_NODE}) ({grown})"
    if g.second_process is not None:
        present += f"\nor {node_max(g.second_process)}"
    share = f"{present} * 0"
    if g.cotenant_sm is not None:
        share = f"({node_max(g.cotenant_sm)} and on ({v.LABEL_NODE}) {present})\nor {share}"
    return (
        _rule(v.GPU_SM_ACTIVE, node_max(g.sm_active)),
        _rule(v.GPU_TENSOR_ACTIVE, node_max(g.tensor_active)),
        _rule(v.GPU_DRAM_ACTIVE, node_max(g.dram_active)),
        _rule(v.GPU_CLOCK_DEFICIT, node_max(deficit, (v.LABEL_NODE, v.LABEL_REASON))),
        _rule(v.GPU_COTENANT, share),
        _rule(v.GPU_LINK, node_max(g.link)),
        _rule(v.GPU_FAULT, f"sum by ({v.LABEL_NODE}) ({placed(g.faults)})"),
    )


def per_target(node_series: str) -> str:
    """A series with one sample per node, given to every target on that node (several targets
    may share one node; the node's series must be one per node)."""
    return (f"max by ({LABEL_INSTANCE}) (\n{v.TARGET_NODE.name}\n"
            f"* on ({v.LABEL_NODE}) group_left ()\n{node_series}\n)")
