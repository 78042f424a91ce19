"""The series the verdict's recording rules write (``verdict.yml``), and what reads them.

The answer is :data:`CAUSE_SHARE`: per inference target (``instance``) and burning latency SLO
(``slo``), one series per cause (``cause``, a :mod:`governor.contracts.causes` name) whose value is
the share of the SLO's breach (its latency over the threshold) that the cause explains, 0-1. It
exists only while that SLO burns on that target; ``cause="unknown"`` (value 1) when it burns and
no rule holds. Boards, alerts, ``governor status``/``why`` and the controller read it; the other
series here are its inputs, kept so that ``governor why`` can show the numbers behind a verdict::

    >>> CAUSE_SHARE.name, CAUSE_SHARE.labels[:3]
    ('verdict:cause:share', ('instance', 'slo', 'cause'))

The inputs are recorded per target (``instance``), or per GPU placement (``node``: the machine a
GPU and a target share; a ``node`` label where the scrape config sets one, else the host part of
``instance``), so that the same rules read Governor's exporter or dcgm-exporter, Governor's
service or stock vLLM.
"""

from __future__ import annotations

from typing import Final

from governor.contracts.declaration import Metric
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.service import LABEL_STAGE
from governor.contracts.metrics.slo import LABEL_SERVICE, LABEL_SLO

LABEL_CAUSE: Final = "cause"
LABEL_NODE: Final = "node"
LABEL_PART: Final = "part"  # a part of the first-token path: PART_*
LABEL_STEP: Final = "step"  # a step of the attribution: STEP_*
LABEL_REASON: Final = "reason"

# The parts a first token's time is cut into (governor serve's stages, or vLLM's own timings).
PART_READ: Final = "read"  # the request's bytes arriving (governor serve only)
PART_TEXT: Final = "text"  # parsing, the chat template, the tokenizer and waiting for them
PART_QUEUE: Final = "queue"  # the admission queue and the engine's waiting queue
PART_PREFILL: Final = "prefill"  # scheduled to first token
PARTS: Final = (PART_READ, PART_TEXT, PART_QUEUE, PART_PREFILL)

_TARGET: Final = (LABEL_INSTANCE,)
_PER_SLO: Final = (LABEL_INSTANCE, LABEL_SLO, LABEL_SERVICE)


def _gauge(name: str, help: str, unit: str, labels: tuple[str, ...]) -> Metric:
    return Metric(name, "gauge", help, unit, labels)


# ---- the answer --------------------------------------------------------------------------------
CAUSE_SHARE: Final = _gauge(
    "verdict:cause:share",
    "Share of a burning latency SLO's breach on one target that a cause explains (0-1); only "
    "while the SLO burns there; cause=unknown when no rule holds.", "ratio",
    (LABEL_INSTANCE, LABEL_SLO, LABEL_CAUSE, LABEL_SERVICE))
BURN: Final = _gauge(
    "verdict:burn:ratio",
    "A latency SLO's error ratio on one target over the verdict's window, over the error "
    "budget: at 1 or more it burns there.", "ratio", _PER_SLO)
EXCESS: Final = _gauge(
    "verdict:excess:seconds",
    "How far the SLO's quantile on one target is over its threshold (what the shares divide).",
    "seconds", _PER_SLO)

# ---- per target: latencies and the engine ------------------------------------------------------
CLIENT_QUANTILE: Final = _gauge(
    "verdict:client_quantile:seconds",
    "The SLO's own quantile of its own histogram on one target over the verdict's window.",
    "seconds", _PER_SLO)
ENGINE_ITL_QUANTILE: Final = _gauge(
    "verdict:engine_itl_quantile:seconds",
    "vLLM's own inter-token latency at the SLO's quantile, on one target.", "seconds", _PER_SLO)
ENGINE_ITL_MEDIAN: Final = _gauge(
    "verdict:engine_itl_median:seconds", "vLLM's own median inter-token latency on one target.",
    "seconds", _TARGET)
ENGINE_ITL_MEDIAN_NOW: Final = _gauge(
    "verdict:engine_itl_median_now:seconds",
    "vLLM's own median inter-token latency on one target over the last two scrapes: the step "
    "it makes now.", "seconds", _TARGET)
ENGINE_ITL_MEDIAN_BASELINE: Final = _gauge(
    "verdict:engine_itl_median_baseline:seconds",
    "The low decile of that median over the verdict's long window: the target's usual step.",
    "seconds", _TARGET)
ENGINE_ITL_TAIL: Final = _gauge(
    "verdict:engine_itl_p99:seconds", "vLLM's own 99th percentile inter-token latency on one "
    "target.", "seconds", _TARGET)
ENGINE_ITL_TAIL_BASELINE: Final = _gauge(
    "verdict:engine_itl_p99_baseline:seconds",
    "The low decile of that tail over the verdict's long window: the target's usual tail.",
    "seconds", _TARGET)
STEP_TOKENS: Final = _gauge(
    "verdict:step_tokens_p999:tokens", "The 99.9th percentile of tokens per engine step: the "
    "tallest steps, from the first few in a window.",
    "tokens", _TARGET)
RUNNING: Final = _gauge(
    "verdict:running:requests", "The most requests the engine ran at once over the window: "
    "a decode-only step schedules at most that many tokens.",
    "requests", _TARGET)
PREEMPTIONS: Final = _gauge(
    "verdict:preemptions:rate", "Preemptions per second over the window.", "per_second",
    _TARGET)
KV_USAGE: Final = _gauge(
    "verdict:kv_usage:ratio", "The fullest the KV cache was over the window.", "ratio",
    _TARGET)
ENGINE_WAITING: Final = _gauge(
    "verdict:engine_waiting:requests", "Requests waiting in the engine's own queue, averaged over "
    "the window (not the service's admission queue).", "requests", _TARGET)
WAITING: Final = _gauge(
    "verdict:waiting:requests", "Requests waiting (admission queue and the engine's), averaged.",
    "requests", _TARGET)
STAGE: Final = _gauge(
    "verdict:stage:seconds", "Mean seconds per request in each of governor serve's stages.",
    "seconds", (LABEL_INSTANCE, LABEL_STAGE))
STAGE_TAIL: Final = _gauge(
    "verdict:stage_p99:seconds", "The 99th percentile of seconds per request in each of "
    "governor serve's stages.", "seconds", (LABEL_INSTANCE, LABEL_STAGE))
TTFT_PART: Final = _gauge(
    "verdict:ttft_part:seconds", "The 99th percentile of seconds per request in each part of "
    "the first-token path (read, text, queue, prefill; a part of several stages sums theirs).",
    "seconds", (LABEL_INSTANCE, LABEL_PART))
STREAM_WRITE_SHARE: Final = _gauge(
    "verdict:stream_write:ratio", "Writing to the client, as a share of the time between "
    "tokens the client saw (counted as the writes pass).", "ratio", _TARGET)
RANK_SPREAD: Final = _gauge(
    "verdict:rank_spread:ratio", "The slowest data-parallel rank's median inter-token latency "
    "over the fastest's (2 ranks or more).", "ratio", _TARGET)

# ---- per GPU placement, then per target ----------------------------------------------------------
TARGET_NODE: Final = _gauge(
    "verdict:target_node:info", "1 for each inference target and the node it runs on.", "",
    (LABEL_INSTANCE, LABEL_NODE))
GPU_SM_ACTIVE: Final = _gauge(
    "verdict:gpu_sm_active:ratio", "The busiest GPU's SM activity on a node.", "ratio",
    (LABEL_NODE,))
GPU_TENSOR_ACTIVE: Final = _gauge(
    "verdict:gpu_tensor_active:ratio", "The busiest GPU's tensor-pipe activity on a node.",
    "ratio", (LABEL_NODE,))
GPU_DRAM_ACTIVE: Final = _gauge(
    "verdict:gpu_dram_active:ratio", "The busiest GPU's DRAM bandwidth use on a node.", "ratio",
    (LABEL_NODE,))
GPU_CLOCK_DEFICIT: Final = _gauge(
    "verdict:gpu_clock_deficit:ratio", "1 - SM clock / its highest over the long window, on a "
    "GPU whose clocks a throttle reason holds down; the worst on the node.", "ratio",
    (LABEL_NODE, LABEL_REASON))
GPU_COTENANT: Final = _gauge(
    "verdict:gpu_cotenant:ratio", "Another process on a GPU of the node: its share of SM time "
    "where the exporter reads it, else 0 (memory or a second process says it is there).",
    "ratio", (LABEL_NODE,))
GPU_LINK: Final = _gauge(
    "verdict:gpu_link:ratio", "The busiest PCIe or NVLink link on a node, as a share of its "
    "capacity.", "ratio", (LABEL_NODE,))
GPU_FAULT: Final = _gauge(
    "verdict:gpu_fault:count", "XID events, uncorrected ECC errors and lost GPUs on a node "
    "over the last five short windows.", "events", (LABEL_NODE,))
SLOWDOWN: Final = _gauge(
    "verdict:slowdown:ratio", "How much slower a target's steps run for a GPU condition "
    "(gpu_throttled, gpu_shared, interconnect): 1 / clock share, or the median step against "
    "its baseline.", "ratio", (LABEL_INSTANCE, LABEL_CAUSE))
FAULT: Final = _gauge(
    "verdict:fault:count", "GPU faults on a target's node over the last five short windows.",
    "events", _TARGET)
RESIDUAL: Final = _gauge(
    "verdict:residual:seconds", "What is left of the excess after each step of the "
    "attribution (its step).", "seconds",
    (LABEL_INSTANCE, LABEL_SLO, LABEL_SERVICE, LABEL_STEP))

# The steps of the attribution, in order (docs/why.md): the GPU's condition, then the service's
# own stages (writing to the client between tokens; reading and the text work before the first),
# then the KV cache, then the prefill spikes or the queue; saturation takes what is left.
STEP_GPU: Final = "gpu"
STEP_SERVICE: Final = "service"
STEP_READ: Final = "read"
STEP_TEXT: Final = "text"
STEP_KV: Final = "kv"
STEP_BATCHING: Final = "batching"
STEP_QUEUE: Final = "queue"
STEP_SATURATION: Final = "saturation"

# The recorded series that exist only while what they record happens (an SLO burning with enough
# events, a throttle reason, a second process, a fault, two ranks): a healthy stack has none.
CONDITIONAL: Final = frozenset(metric.name for metric in (
    CAUSE_SHARE, BURN, SLOWDOWN, FAULT, GPU_CLOCK_DEFICIT, GPU_COTENANT, GPU_FAULT, RANK_SPREAD))
