"""The verdict's promtool scenarios: each cause injected into a healthy target's raw series, and
the leading cause checked two short windows (at most two minutes) after its onset; a healthy
target gets no verdict.

Every scenario starts from one healthy inference target and its GPU on one host, scraped for six
short windows (a part of the long window, enough for the target's usual step), then changes what
the cause changes, from the onset on: the engine's and the client's latencies, the tokens per
step, preemptions, the stages, the GPU's readings. The series are the raw ones a fleet exposes
(vLLM's, ``governor serve``'s, Governor's exporter's or dcgm-exporter's, as the spec reads them),
so the scenarios test the whole chain from the inputs to the shares. Latencies are whole
observation counts per scrape at values inside one bucket each, so the quantiles land where the
scenario puts them whatever the interpolation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from governor.alerts.ruletests import ExprCheck, InputSeries, RuleTest
from governor.alerts.slo_rules import slo_labels
from governor.alerts.verdict_evidence import path_of
from governor.contracts import causes
from governor.contracts.causes import Latency
from governor.contracts.endpoints import EXPORTER, INFERENCE
from governor.contracts.metrics import dcgm, gpu, service, vllm
from governor.contracts.metrics import verdict as v
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB, LABEL_LE, UP
from governor.contracts.promql import Selector, equal_to, exposition_float, format_number
from governor.contracts.stages import Stage
from governor.generation.catalog import histogram_edges
from governor.generation.params import RenderParams
from governor.slo.spec import SLO, LatencySLI, SloSpec

HOST: Final = "10.0.0.7"
TARGET_INSTANCE: Final = INFERENCE.address(HOST)
GPU_INSTANCE: Final = EXPORTER.address(HOST)
# Observations per scrape of each latency, and the engine's steps' tokens per scrape.
OBSERVATIONS: Final = 100
# Healthy history before the onset, in short windows, and when after it the verdict is checked:
# two short windows of the fault (its whole window and a few evaluations), at most two minutes
# (the target), so production's one-minute window gets six minutes of history and two after.
HISTORY_WINDOWS: Final = 6
CHECK_AFTER_WINDOWS: Final = 2
CHECK_AFTER_SECONDS: Final = 2 * 60
MIN_OBJECTIVE: Final = 0.95
GIB: Final = 1024**3

# A latency distribution: (value, observations per scrape) pairs.
Dist = tuple[tuple[float, int], ...]


@dataclass(frozen=True)
class Target:
    """What one target and its GPU show in one phase of a scenario."""

    engine_itl: Dist = ((0.008, 97), (0.07, 3))
    client_extra_itl: float = 0.0  # the client's gaps less the engine's (a slow reader)
    # Whether writing to the client takes that extra (a slow reader); else the service's own
    # event loop came late to the engine's tokens, and its writes stay quick.
    extra_is_writing: bool = True
    step_tokens: int = 40  # the tallest steps' tokens
    running: int = 32
    waiting: int = 0
    preemptions_per_scrape: int = 0
    kv_usage: float = 0.3
    # First-token parts: seconds per request (governor serve's stages, vLLM's timings).
    read: float = 0.001
    text: float = 0.004
    text_queue: float = 0.0  # waiting for a text thread or a large body's turn
    queue: float = 0.01
    prefill: float = 0.05
    stream_write: float = 0.01  # per request, between tokens
    decode: float = 2.0
    sm_active: float = 0.5
    tensor_active: float = 0.3
    dram_active: float = 0.4
    sm_clock_hz: float = 1.98e9
    reasons: tuple[str, ...] = ()
    power_limit_watts: float = 700.0  # enforced; the board's own (default) limit is 700 W
    memory_used: float = 120 * GIB
    second_process: bool = False
    link_bytes_per_second: float = 1e9
    xid_events: int = 0  # XIDs raised per scrape
    # One XID at the onset and no more, on a series new then (governor's exporter names each
    # code when it first occurs): the stall it caused still explains the breach after it.
    xid_once: bool = False
    engine_up: bool = True  # the engine answers its scrapes

    @property
    def ttft(self) -> float:
        return self.read + self.text_queue + self.text + self.queue + self.prefill


@dataclass(frozen=True)
class Scenario:
    name: str
    latency: Latency
    after: Target
    expected: str | None  # the leading cause; None: no verdict at all
    client_side: bool = False  # a cause only the client's view shows (governor serve's stages)
    before: Target | None = None  # the target before the onset; None: the healthy one
    # Read through Governor's exporter only (dcgm-exporter's default fields lack what it needs).
    governor_exporter_only: bool = False
    # Causes the verdict must not name at all (the controller holds for any GPU condition named).
    not_named: tuple[str, ...] = ()


def _slow(dist: Dist, factor: float) -> Dist:
    return tuple((value * factor, count) for value, count in dist)


def scenarios(itl: float, ttft: float) -> tuple[Scenario, ...]:
    """Every cause, at the SLOs' thresholds: ``itl`` between tokens, ``ttft`` to the first.

    A healthy target's slowest gaps sit at 60% of the inter-token threshold; a fault takes them
    past it (twice it for spikes, 1.2 times for every step), or takes a part of the first
    token's path to three times its threshold."""
    healthy = Target(engine_itl=((0.008, 97), (0.6 * itl, 3)))
    spikes: Dist = ((0.008, 95), (2 * itl, 5))
    uniform: Dist = ((1.2 * itl, 100),)
    slow = 3 * ttft
    return (
        Scenario("healthy: no verdict", Latency.ITL, healthy, None),
        Scenario("prefill chunks stall decodes: batching", Latency.ITL,
                 replace(healthy, engine_itl=spikes, step_tokens=8000, sm_active=0.95,
                         tensor_active=0.7), causes.BATCHING.name),
        Scenario("the engine preempts: kv_cache", Latency.ITL,
                 replace(healthy, engine_itl=spikes, preemptions_per_scrape=30, kv_usage=0.99),
                 causes.KV_CACHE.name),
        Scenario("clocks held by heat: gpu_throttled", Latency.ITL,
                 replace(healthy, engine_itl=_slow(healthy.engine_itl, 2.0), sm_clock_hz=0.99e9,
                         reasons=(gpu.REASON_HW_THERMAL,), step_tokens=600),
                 causes.GPU_THROTTLED.name),
        Scenario("a power limit lowered under load: gpu_throttled", Latency.ITL,
                 replace(healthy, engine_itl=_slow(healthy.engine_itl, 2.0), sm_clock_hz=0.99e9,
                         reasons=(gpu.REASON_SW_POWER_CAP,), power_limit_watts=400.0,
                         step_tokens=600),
                 causes.GPU_THROTTLED.name),
        # An H100 at its own 700 W during every long prefill: the cap holds the clock 15-20% down
        # while the budget's spikes make the breach, and a smaller budget relieves both.
        Scenario("prefill chunks at the board's own power limit: batching", Latency.ITL,
                 replace(healthy, engine_itl=spikes, step_tokens=8000, sm_active=0.95,
                         tensor_active=0.7, sm_clock_hz=1.65e9,
                         reasons=(gpu.REASON_SW_POWER_CAP,)),
                 causes.BATCHING.name, governor_exporter_only=True,
                 not_named=(causes.GPU_THROTTLED.name,)),
        Scenario("another process on the GPU: gpu_shared", Latency.ITL,
                 replace(healthy, engine_itl=_slow(healthy.engine_itl, 2.0), step_tokens=600,
                         memory_used=141 * GIB, second_process=True), causes.GPU_SHARED.name),
        Scenario("an XID stalls the engine: gpu_fault", Latency.ITL,
                 replace(healthy, engine_itl=((0.008, 95), (2.0, 5)), xid_events=1),
                 causes.GPU_FAULT.name),
        Scenario("a saturated link: interconnect", Latency.ITL,
                 replace(healthy, engine_itl=_slow(healthy.engine_itl, 2.0),
                         link_bytes_per_second=0.9 * 2 * causes.PCIE_BYTES_PER_SECOND),
                 causes.INTERCONNECT.name),
        Scenario("every step slow, SMs saturated: gpu_compute_bound", Latency.ITL,
                 replace(healthy, engine_itl=uniform, running=1000, step_tokens=1000,
                         sm_active=0.97, tensor_active=0.8), causes.GPU_COMPUTE_BOUND.name),
        Scenario("every step slow, DRAM saturated: gpu_memory_bound", Latency.ITL,
                 replace(healthy, engine_itl=uniform, running=1000, step_tokens=1000,
                         sm_active=0.95, tensor_active=0.2, dram_active=0.92),
                 causes.GPU_MEMORY_BOUND.name),
        # Every decode step past the threshold, a few prefill chunks past it further: the breach
        # stays without the spikes, so a smaller budget is not the answer.
        Scenario("steady steps past the SLO, spikes above them, DRAM saturated: "
                 "gpu_memory_bound", Latency.ITL,
                 replace(healthy, engine_itl=((1.4 * itl, 90), (4 * itl, 10)), running=280,
                         step_tokens=3000, sm_active=0.95, tensor_active=0.2,
                         dram_active=0.92),
                 causes.GPU_MEMORY_BOUND.name),
        # Memory-bound at the edge: the typical step just under the threshold, a third of them
        # just past it, a few prefill chunks far past it. The median meets the SLO, but spikes
        # cannot make a third of the gaps miss: a smaller budget would not end the breach.
        Scenario("a third of the steps just past the SLO, the median under it, DRAM saturated: "
                 "gpu_memory_bound", Latency.ITL,
                 replace(healthy, engine_itl=((0.7 * itl, 62), (1.2 * itl, 35), (3 * itl, 3)),
                         running=280, step_tokens=3000, sm_active=0.95, tensor_active=0.2,
                         dram_active=0.92),
                 causes.GPU_MEMORY_BOUND.name, not_named=(causes.BATCHING.name,)),
        Scenario("clients read slowly: client_stream", Latency.ITL,
                 replace(healthy, client_extra_itl=3 * itl, stream_write=1.5),
                 causes.CLIENT_STREAM.name, client_side=True),
        # The engine's tail meets the SLO, prefill chunks and all, but the service comes late to
        # its tokens (a frontend starved of CPU): no budget would shorten those gaps.
        Scenario("the service falls behind a healthy engine: unknown, not batching", Latency.ITL,
                 replace(healthy, client_extra_itl=3 * itl, extra_is_writing=False,
                         step_tokens=8000),
                 causes.UNKNOWN.name, client_side=True, not_named=(causes.BATCHING.name,)),
        # vLLM allocates its memory before it answers: an exporter that watched it start does not
        # take the engine for a co-tenant, so slower steps stay unexplained.
        Scenario("the engine starts beside the exporter: unknown, not gpu_shared", Latency.ITL,
                 replace(healthy, engine_itl=_slow(healthy.engine_itl, 2.0)),
                 causes.UNKNOWN.name, before=replace(healthy, engine_up=False,
                                                     memory_used=2 * GIB)),
        Scenario("spikes nothing explains: unknown", Latency.ITL,
                 replace(healthy, engine_itl=spikes), causes.UNKNOWN.name),
        Scenario("requests wait for the engine: queue", Latency.TTFT,
                 replace(healthy, queue=slow, waiting=40), causes.QUEUE.name),
        Scenario("requests wait behind a saturated GPU: gpu_compute_bound", Latency.TTFT,
                 replace(healthy, queue=slow, waiting=40, prefill=2 * ttft, sm_active=0.97,
                         tensor_active=0.8), causes.GPU_COMPUTE_BOUND.name),
        # Past what the GPU prefills, a chunk rides in every step: the step itself misses.
        Scenario("prefill past the GPU, every step a chunk: gpu_compute_bound", Latency.ITL,
                 replace(healthy, engine_itl=((0.008, 20), (2 * itl, 80)), step_tokens=8000,
                         sm_active=0.97, tensor_active=0.8, waiting=40),
                 causes.GPU_COMPUTE_BOUND.name),
        # Documents queue now and then on a busy GPU (first come, first served) while most steps
        # decode: their chunks make the spikes, and a smaller budget shortens them.
        Scenario("prefill chunks beside a queue on a busy GPU: batching", Latency.ITL,
                 replace(healthy, engine_itl=spikes, step_tokens=8000, sm_active=0.97,
                         tensor_active=0.8, waiting=3), causes.BATCHING.name),
        Scenario("a slow tokenizer: tokenizer", Latency.TTFT,
                 replace(healthy, text=slow), causes.TOKENIZER.name),
        Scenario("bodies arrive slowly: request_read", Latency.TTFT,
                 replace(healthy, read=slow), causes.REQUEST_READ.name, client_side=True),
        # Bodies of unknown length take turns: the wait for one is the slow bodies', not the
        # tokenizer's; a slow tokenizer makes the prompts wait for its thread, and that is its.
        Scenario("slow bodies hold the turns: request_read", Latency.TTFT,
                 replace(healthy, read=slow, text_queue=2 * slow), causes.REQUEST_READ.name,
                 client_side=True),
        Scenario("prompts wait for a slow tokenizer's thread: tokenizer", Latency.TTFT,
                 replace(healthy, text=slow, text_queue=2 * slow), causes.TOKENIZER.name,
                 client_side=True),
        Scenario("waiting for KV blocks: kv_cache", Latency.TTFT,
                 replace(healthy, queue=slow, waiting=40, preemptions_per_scrape=30,
                         kv_usage=0.99),
                 causes.KV_CACHE.name),
        Scenario("a full cache holds the queue, nothing preempted yet: kv_cache", Latency.TTFT,
                 replace(healthy, queue=slow, waiting=40, kv_usage=0.97),
                 causes.KV_CACHE.name),
        Scenario("an XID's stalls fill the queue: gpu_fault", Latency.TTFT,
                 replace(healthy, queue=slow, xid_events=1), causes.GPU_FAULT.name),
        Scenario("one XID, its counter new and then flat, left a queue: gpu_fault", Latency.TTFT,
                 replace(healthy, queue=slow, xid_once=True), causes.GPU_FAULT.name),
    )


class _Series:
    """The input series of one scenario, sample by sample."""

    def __init__(self, spec: SloSpec, samples: int, onset: int) -> None:
        self.spec, self.samples, self.onset = spec, samples, onset
        self.out: list[InputSeries] = []
        target = spec.targets.inference
        self.inference = {**target.selector, LABEL_JOB: target.job,
                          LABEL_INSTANCE: TARGET_INSTANCE}
        gpus = spec.targets.gpu
        self.gpu = {**gpus.selector, LABEL_JOB: gpus.job, LABEL_INSTANCE: GPU_INSTANCE}

    def add(self, metric: str, labels: Mapping[str, str], before: float, after: float, *,
            counter: bool = False) -> None:
        name = Selector(metric, equal_to(dict(labels))).render()
        n, m = self.onset, self.samples - self.onset
        if counter:
            values = f"0+{format_number(before)}x{n - 1} " \
                     f"{format_number(before * n + after)}+{format_number(after)}x{m - 1}"
        else:
            values = f"{format_number(before)}x{n - 1} {format_number(after)}x{m - 1}"
        self.out.append(InputSeries(name, values))

    def appears(self, metric: str, labels: Mapping[str, str], value: float) -> None:
        """A series absent before the onset, ``value`` from it on."""
        name = Selector(metric, equal_to(dict(labels))).render()
        after = self.samples - self.onset - 1
        self.out.append(InputSeries(name, f"_x{self.onset} {format_number(value)}x{after}"))

    def histogram(self, metric: str, labels: Mapping[str, str], edges: Sequence[float],
                  before: Dist, after: Dist) -> None:
        for edge in (*edges, float("inf")):
            def below(dist: Dist, edge: float = edge) -> int:
                return sum(count for value, count in dist if value <= edge)
            self.add(metric + "_bucket", {**labels, LABEL_LE: exposition_float(edge)},
                     below(before), below(after), counter=True)
        self.add(metric + "_count", labels, sum(c for _, c in before),
                 sum(c for _, c in after), counter=True)
        self.add(metric + "_sum", labels, sum(v * c for v, c in before),
                 sum(v * c for v, c in after), counter=True)


def _engine(s: _Series, before: Target, after: Target) -> None:
    engine = {**s.inference, vllm.LABEL_MODEL: "m", vllm.LABEL_ENGINE: "0"}
    for slo in s.spec.slos:  # an SLI on vLLM's own histograms may pick a model
        if isinstance(slo.sli, LatencySLI) and slo.sli.metric.startswith("vllm:"):
            engine.update(slo.sli.selector)
    s.add(UP.name, s.inference, float(before.engine_up), float(after.engine_up))
    s.histogram(vllm.INTER_TOKEN_LATENCY.name, engine, vllm.INTER_TOKEN_LATENCY.buckets,
                before.engine_itl, after.engine_itl)
    steps: Dist = ((float(before.running), OBSERVATIONS - 2), (float(before.step_tokens), 2))
    steps_after: Dist = ((float(after.running), OBSERVATIONS - 2),
                         (float(after.step_tokens), 2))
    s.histogram(vllm.ITERATION_TOKENS.name, engine, vllm.ITERATION_TOKENS.buckets, steps,
                steps_after)
    s.add(vllm.NUM_REQUESTS_RUNNING.name, engine, before.running, after.running)
    s.add(vllm.NUM_REQUESTS_WAITING.name, engine, before.waiting, after.waiting)
    s.add(vllm.KV_CACHE_USAGE.name, engine, before.kv_usage, after.kv_usage)
    s.add(vllm.NUM_PREEMPTIONS.total, engine, before.preemptions_per_scrape,
          after.preemptions_per_scrape, counter=True)
    if s.spec.stock_vllm:
        for metric, pick in ((vllm.REQUEST_QUEUE_TIME, "queue"),
                             (vllm.REQUEST_PREFILL_TIME, "prefill")):
            s.histogram(metric.name, engine, metric.buckets,
                        ((getattr(before, pick), OBSERVATIONS),),
                        ((getattr(after, pick), OBSERVATIONS),))
        render = {**engine, vllm.LABEL_REQUEST_TYPE: "chat"}
        s.histogram(vllm.REQUEST_RENDER_DURATION.name, render,
                    vllm.REQUEST_RENDER_DURATION.buckets, ((before.text, OBSERVATIONS),),
                    ((after.text, OBSERVATIONS),))


_STAGE_OF: Final = {Stage.READ: "read", Stage.TEXT_QUEUE: "text_queue", Stage.TOKENIZE: "text",
                    Stage.ADMISSION: "queue",
                    Stage.PREFILL: "prefill", Stage.STREAM_WRITE: "stream_write",
                    Stage.DECODE: "decode"}


# Writing to a client that keeps up: this share of the time between its tokens.
_HEALTHY_WRITE_SHARE: Final = 0.005


def _writing(target: Target) -> float:
    """Seconds written per scrape: what a slow reader adds to the client's gaps, and the small
    share of an engine-paced gap that writing takes."""
    engine = sum(value * count for value, count in target.engine_itl)
    client = sum(value * count
                 for value, count in _slow_by(target.engine_itl, target.client_extra_itl))
    slow_reader = client - engine if target.extra_is_writing else 0.0
    return slow_reader + _HEALTHY_WRITE_SHARE * engine


def _service(s: _Series, before: Target, after: Target) -> None:
    s.add(service.STREAM_WRITE_SECONDS.total, {**s.inference, service.LABEL_MODEL: "m"},
          _writing(before), _writing(after), counter=True)
    for stage in Stage:
        pick = _STAGE_OF.get(stage)
        b, a = (getattr(before, pick), getattr(after, pick)) if pick else (0.0002, 0.0002)
        s.histogram(service.REQUEST_STAGE.name, {**s.inference, service.LABEL_STAGE: stage},
                    service.REQUEST_STAGE.buckets, ((b, OBSERVATIONS),), ((a, OBSERVATIONS),))


def _latency_sli(s: _Series, slo: SLO, before: Target, after: Target) -> None:
    """The SLO's own histogram: the client's view (or vLLM's, on a stock fleet)."""
    sli = slo.sli
    assert isinstance(sli, LatencySLI)
    if sli.metric == vllm.INTER_TOKEN_LATENCY.name:
        return  # the engine's own histogram, already there
    labels = {**s.inference, **sli.selector}
    if path_of(slo) is Latency.ITL:
        b = _slow_by(before.engine_itl, before.client_extra_itl)
        a = _slow_by(after.engine_itl, after.client_extra_itl)
    else:
        b, a = ((before.ttft, OBSERVATIONS),), ((after.ttft, OBSERVATIONS),)
    # The edges its server exposes under this spec: the SLO's threshold among them.
    edges = histogram_edges(s.spec)[sli.metric]
    if sli.metric.startswith("vllm"):
        labels = {vllm.LABEL_MODEL: "m", vllm.LABEL_ENGINE: "0", **labels}
    else:
        labels = {**labels, service.LABEL_MODEL: "m"}
    s.histogram(sli.metric, labels, edges, b, a)


def _slow_by(dist: Dist, extra: float) -> Dist:
    """The client's gaps: the engine's, plus what writing to it adds to the slowest few."""
    if not extra:
        return dist
    (fast, fast_count), *rest = dist
    return ((fast, fast_count - 5), (extra, 5), *rest) if fast_count > 5 else dist


def _gpus(s: _Series, before: Target, after: Target) -> None:
    if s.spec.targets.gpu.dcgm:
        _dcgm(s, before, after)
        return
    g = {**s.gpu, gpu.LABEL_GPU: "0", gpu.LABEL_UUID: "GPU-0", gpu.LABEL_MODEL: "H200"}
    s.add(gpu.UP.name, g, 1, 1)
    s.add(gpu.SM_ACTIVE.name, g, before.sm_active, after.sm_active)
    s.add(gpu.TENSOR_ACTIVE.name, g, before.tensor_active, after.tensor_active)
    s.add(gpu.DRAM_BANDWIDTH_UTILIZATION.name, g, before.dram_active, after.dram_active)
    s.add(gpu.CLOCK.name, {**g, gpu.LABEL_CLOCK: "sm"}, before.sm_clock_hz, after.sm_clock_hz)
    for reason in (gpu.REASON_GPU_IDLE, gpu.REASON_HW_THERMAL, gpu.REASON_SW_POWER_CAP):
        s.add(gpu.CLOCK_EVENT_ACTIVE.name, {**g, gpu.LABEL_REASON: reason},
              float(reason in before.reasons), float(reason in after.reasons))
    s.add(gpu.POWER_LIMIT.name, g, before.power_limit_watts, after.power_limit_watts)
    s.add(gpu.POWER_DEFAULT_LIMIT.name, g, 700.0, 700.0)
    s.add(gpu.MEMORY_USED.name, g, before.memory_used, after.memory_used)
    s.add(gpu.PROCESS_MEMORY_USED.name, {**g, gpu.LABEL_PID: "100", gpu.LABEL_CONTAINER: ""},
          before.memory_used, before.memory_used)
    s.add(gpu.PROCESS_MEMORY_USED.name, {**g, gpu.LABEL_PID: "200", gpu.LABEL_CONTAINER: ""},
          0, after.memory_used - before.memory_used if after.second_process else 0)
    s.add(gpu.PCIE_TRANSMIT_RATE.name, g, before.link_bytes_per_second / 2,
          after.link_bytes_per_second / 2)
    s.add(gpu.PCIE_RECEIVE_RATE.name, g, before.link_bytes_per_second / 2,
          after.link_bytes_per_second / 2)
    if after.xid_once:
        s.appears(gpu.XID_ERRORS.total, {**g, gpu.LABEL_XID: "48"}, 1)
    else:
        s.add(gpu.XID_ERRORS.total, {**g, gpu.LABEL_XID: "48"}, before.xid_events,
              after.xid_events, counter=True)
    s.add(gpu.ECC_UNCORRECTED_ERRORS.total, g, 0, 0, counter=True)


def _dcgm(s: _Series, before: Target, after: Target) -> None:
    g = {**s.gpu, dcgm.LABEL_GPU: "0", dcgm.LABEL_UUID: "GPU-0", dcgm.LABEL_MODEL: "H200"}

    def field(reading: dcgm.Reading, b: float, a: float) -> None:
        named = reading.in_release(dcgm.RELEASE_4_9)
        assert named is not None
        scale = float(named.to_base)
        s.add(named.name, g, b / scale, a / scale)

    field(dcgm.SM_ACTIVE, before.sm_active, after.sm_active)
    field(dcgm.TENSOR_ACTIVE, before.tensor_active, after.tensor_active)
    field(dcgm.DRAM_ACTIVE, before.dram_active, after.dram_active)
    field(dcgm.SM_CLOCK, before.sm_clock_hz, after.sm_clock_hz)
    field(dcgm.FB_USED, before.memory_used, after.memory_used)
    field(dcgm.PCIE_TX, before.link_bytes_per_second / 2, after.link_bytes_per_second / 2)
    field(dcgm.PCIE_RX, before.link_bytes_per_second / 2, after.link_bytes_per_second / 2)
    bits = dcgm.REASON_BITS

    def mask(t: Target) -> float:
        return float(sum(bits[reason] for reason in t.reasons))

    field(dcgm.CLOCK_EVENT_REASONS, mask(before), mask(after))
    xid = dcgm.XID.in_release(dcgm.RELEASE_4_9)
    assert xid is not None
    s.add(xid.name, {**g, dcgm.LABEL_XID_CODE: "0"}, 0,
          48 if after.xid_events or after.xid_once else 0)


def _slo_for(spec: SloSpec, latency: Latency) -> SLO | None:
    """The first SLO on ``latency``'s path whose objective is a tail: the scenarios put a few
    percent of the observations over the threshold, which burns a 95% objective or tighter."""
    for slo in spec.slos:
        if path_of(slo) is latency and slo.objective >= MIN_OBJECTIVE:
            return slo
    return None


def _client_view(slo: SLO) -> bool:
    """The SLO is on one of the service's own histograms: the client's view, stages included."""
    return isinstance(slo.sli, LatencySLI) and \
        slo.sli.metric in {m.name for m in service.LATENCY_HISTOGRAMS}


def _threshold(slo: SLO | None, default: float) -> float:
    return slo.sli.threshold_seconds if slo is not None and isinstance(slo.sli, LatencySLI) \
        else default


def verdict_tests(spec: SloSpec, params: RenderParams) -> tuple[RuleTest, ...]:
    step = params.scrape_interval_seconds
    # Enough healthy history for the target's usual step (a part of the long window will do:
    # its low decile is the usual step already) and the GPU's highest clock.
    short = params.fast_window_seconds
    history = max(HISTORY_WINDOWS * short, 4 * step)
    after = min(CHECK_AFTER_WINDOWS * short, CHECK_AFTER_SECONDS)
    onset = -(-history // step)
    check = onset + max(-(-after // step), 2)
    samples = check + 2
    itl_slo, ttft_slo = _slo_for(spec, Latency.ITL), _slo_for(spec, Latency.TTFT)
    found = scenarios(_threshold(itl_slo, 0.12), _threshold(ttft_slo, 1.0))
    healthy = found[0].after
    tests = []
    for scenario in found:
        slo = itl_slo if scenario.latency is Latency.ITL else ttft_slo
        if slo is None or (scenario.client_side and not _client_view(slo)):
            continue
        if scenario.governor_exporter_only and spec.targets.gpu.dcgm:
            continue
        s = _Series(spec, samples, onset)
        before = scenario.before or healthy
        _engine(s, before, scenario.after)
        if not spec.stock_vllm:
            _service(s, before, scenario.after)
        for each in spec.slos:
            if path_of(each) is not None:
                _latency_sli(s, each, before, scenario.after)
        _gpus(s, before, scenario.after)
        leading = (f"topk by ({LABEL_INSTANCE}, slo) (1, "
                   f"{Selector(v.CAUSE_SHARE.name, equal_to({'slo': slo.name}))}) > bool 0")
        anything = f"count({v.CAUSE_SHARE.name}) or vector(0)"
        expected: tuple[ExprCheck, ...] = (ExprCheck((onset - 1) * step, anything, (("{}", 0),)),)
        if scenario.expected is None:
            expected += (ExprCheck(check * step, anything, (("{}", 0),)),)
        else:
            labels = {**slo_labels(spec, slo), LABEL_INSTANCE: TARGET_INSTANCE,
                      v.LABEL_CAUSE: scenario.expected}
            rendered = Selector("", equal_to(labels)).render()
            expected += (ExprCheck(check * step, leading, ((rendered, 1),)),)
        for cause in scenario.not_named:
            named = Selector(v.CAUSE_SHARE.name, equal_to({v.LABEL_CAUSE: cause})).render()
            expected += (ExprCheck(check * step, f"count({named}) or vector(0)",
                                   (("{}", 0),)),)
        tests.append(RuleTest(f"verdict: {scenario.name}", step, tuple(s.out), (), expected))
    return tuple(tests)
