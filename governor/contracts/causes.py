"""Why a latency SLO burns: the closed set of causes Governor can name, declared once.

Each cause is a rule over series Governor already has (its own exporter or dcgm-exporter, vLLM's
own series or ``governor serve``'s stages); the generated recording rules
(:mod:`governor.alerts.verdict_rules`) compute, per inference target and burning SLO, how much of
the burning latency each cause explains, and the verdict is those causes ranked. This module
says what each one is, which latencies it can explain, and what should be done about it: the
controller reads :attr:`Cause.action`, the alerts and ``governor why`` the texts, the drills the
names::

    >>> [str(c.action) for c in (BATCHING, GPU_THROTTLED, QUEUE)]
    ['retune', 'hold', 'scale']
    >>> [cause.name for cause in CAUSES if Latency.ITL in cause.explains][:3]
    ['batching', 'kv_cache', 'gpu_compute_bound']
    >>> str(by_name("gpu_shared").family)
    'gpu_health'

``unknown`` is the verdict when a latency SLO burns and no rule holds: never a guess.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from governor.contracts.metrics import service, vllm


class Latency(enum.StrEnum):
    """The latencies a verdict explains: what the SLO's histogram measures."""

    ITL = "itl"  # between tokens: decode steps, and writing each token to the client
    TTFT = "ttft"  # to the first token: reading, the text work, the queues, the prefill


class Action(enum.StrEnum):
    """What the controller does about a cause."""

    RETUNE = "retune"  # the batching limits move it: the law decides as it always has
    SCALE = "scale"  # demand or work past what one replica serves: raise the scale-out signal
    HOLD = "hold"  # no batching limit fixes it (and a cut would be judged on a tail it did not
    # cause): hold the limits and say why
    NONE = "none"  # nothing known to act on (``unknown``): the law's own judgement stands


class Family(enum.StrEnum):
    SCHEDULING = "scheduling"
    COMPUTE_MEMORY = "compute_memory"
    GPU_HEALTH = "gpu_health"
    COMMUNICATION = "communication"
    SERVICE = "service"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Cause:
    """One cause: its name (the ``cause`` label's value), what it explains and what to do."""

    name: str
    family: Family
    action: Action
    explains: frozenset[Latency]
    summary: str  # one line: what is happening
    remedy: str  # one line: what a team does about it

    @property
    def runbook_anchor(self) -> str:
        """Its section of the runbooks (docs/runbooks.md's "cause: <name>", a GitHub anchor)."""
        return f"cause-{self.name}"


_BOTH: Final = frozenset(Latency)
_ITL: Final = frozenset({Latency.ITL})
_TTFT: Final = frozenset({Latency.TTFT})

BATCHING: Final = Cause(
    "batching", Family.SCHEDULING, Action.RETUNE, _ITL,
    "prefill chunks stall the decodes that share their steps: the tallest steps carry prompts",
    "lower max_num_batched_tokens (the controller does): shorter chunks, shorter spikes")
KV_CACHE: Final = Cause(
    "kv_cache", Family.SCHEDULING, Action.RETUNE, _BOTH,
    "the KV cache is full: requests are preempted and recomputed, or wait for blocks",
    "lower max_num_seqs (the controller does), or give the engine more KV memory")
QUEUE: Final = Cause(
    "queue", Family.SCHEDULING, Action.SCALE, _TTFT,
    "requests wait for the engine: demand is past what the limits in force serve",
    "add capacity (the scale-out signal says how much); shed what cannot be served in time")
GPU_COMPUTE_BOUND: Final = Cause(
    "gpu_compute_bound", Family.COMPUTE_MEMORY, Action.SCALE, _BOTH,
    "the SMs and tensor pipes are saturated by the engine's own work",
    "add replicas or a faster GPU; a smaller batch trades throughput for latency")
GPU_MEMORY_BOUND: Final = Cause(
    "gpu_memory_bound", Family.COMPUTE_MEMORY, Action.SCALE, _ITL,
    "DRAM bandwidth is saturated by decode: every step reads the weights and the batch's KV",
    "add replicas, shorter contexts, or a quantised KV cache; fewer sequences per step")
GPU_THROTTLED: Final = Cause(
    "gpu_throttled", Family.GPU_HEALTH, Action.HOLD, _BOTH,
    "the GPU's clocks are held down (thermal, power cap, hardware slowdown, sync boost)",
    "check cooling, power and the GPU's clock-event reasons; move load off the GPU")
GPU_SHARED: Final = Cause(
    "gpu_shared", Family.GPU_HEALTH, Action.HOLD, _BOTH,
    "another process on the GPU takes SM time or memory from the engine",
    "find the other process (the GPU board's processes) and move it; isolate with MIG")
GPU_FAULT: Final = Cause(
    "gpu_fault", Family.GPU_HEALTH, Action.HOLD, _BOTH,
    "the GPU reported an XID or an uncorrected ECC error, or was lost",
    "drain the GPU and follow the XID's runbook; a lost GPU needs a reset or a node replaced")
INTERCONNECT: Final = Cause(
    "interconnect", Family.COMMUNICATION, Action.HOLD, _BOTH,
    "NVLink or PCIe is saturated, or data-parallel ranks diverge: steps wait on the link",
    "find what saturates the link, or the slow rank; rebalance the ranks")
TOKENIZER: Final = Cause(
    "tokenizer", Family.SERVICE, Action.HOLD, _TTFT,
    "prompts take long to template and tokenize, or wait for the text threads",
    "more text threads or CPU for the server; a faster tokenizer")
CLIENT_STREAM: Final = Cause(
    "client_stream", Family.SERVICE, Action.HOLD, _ITL,
    "clients read the stream slowly: writes wait for them",
    "nothing on the server: the clients or their network are slow (--write-timeout bounds it)")
REQUEST_READ: Final = Cause(
    "request_read", Family.SERVICE, Action.HOLD, _TTFT,
    "request bodies arrive slowly: the clock runs before the prompt is in hand",
    "nothing on the server: the clients or their network are slow (--body-timeout bounds it)")
UNKNOWN: Final = Cause(
    "unknown", Family.UNKNOWN, Action.NONE, _BOTH,
    "the SLO burns and no rule holds: Governor cannot tell why",
    "read the boards; if a cause is missing from this list, say which")

# Every cause, in the order the verdict lists equal shares (and the docs list them).
CAUSES: Final = (BATCHING, KV_CACHE, QUEUE, GPU_COMPUTE_BOUND, GPU_MEMORY_BOUND, GPU_THROTTLED,
                 GPU_SHARED, GPU_FAULT, INTERCONNECT, TOKENIZER, CLIENT_STREAM, REQUEST_READ,
                 UNKNOWN)
NAMES: Final = tuple(cause.name for cause in CAUSES)
# The causes whose mere presence forbids a budget cut: a cut for a throttled, shared or faulty
# GPU would be judged on a tail it did not cause, and the next verification would undo it.
NEVER_CUT_FOR: Final = frozenset({GPU_THROTTLED.name, GPU_SHARED.name, GPU_FAULT.name})
# A cause counts in the verdict when it explains at least this share of the burning latency.
MATERIAL_SHARE: Final = 0.1

# ---- the evidence's thresholds (docs/why.md says where each comes from) ----------------------
# A step carries prefill when the tallest steps hold more tokens than this many per running
# request plus a chunk's worth: a decode-only step schedules one token per running request.
TALL_STEP_PER_RUNNING: Final = 2.0
TALL_STEP_TOKENS: Final = 128
# Prefill spikes slow only the steps that carry a chunk: they are to blame while at most this
# share of the SLO's gaps miss its threshold. Past it the typical step misses, a smaller budget
# would not end the breach, and the spikes are left to the steady step's cause. The simulated
# drills' batching breaches miss 3.5-8.5% of gaps; their memory-bound ones 25-50%.
SPIKES_MISS_AT_MOST: Final = 0.2
# The KV cache is full when its fullest over the window reaches this share of its blocks: vLLM's
# scheduler admits a waiting request only with free blocks for its prompt, so past this a queue
# waits for the cache, preempting or not.
KV_FULL: Final = 0.95
# The GPU is saturated by its own work above these (GPM's SM and tensor activity, DRAM bandwidth).
SM_SATURATED: Final = 0.9
TENSOR_BUSY: Final = 0.5
DRAM_SATURATED: Final = 0.7
# Requests wait behind a saturated GPU when at least this many wait in the engine's own queue on
# average over the window (the service's admission queue is a class limit, not the GPU's).
WAITING_SATURATED: Final = 1.0
# A clock held this far under its own highest of the long window counts as throttled.
CLOCK_DEFICIT: Final = 0.05
# Another process is there: its memory (a second process holding more than PROCESS_MEMORY_BYTES,
# or the GPU's memory up by COTENANT_MEMORY_BYTES on the long window's least: vLLM allocates its
# memory once, at start).
PROCESS_MEMORY_BYTES: Final = 256 * 1024**2
COTENANT_MEMORY_BYTES: Final = 1024**3
# A step this much slower than the target's usual one is a slowdown worth naming.
SLOWDOWN: Final = 1.1
# Link capacities per direction: PCIe Gen5 x16 (64 GB/s) and an H100/H200 SXM's NVLink 4
# (18 links, 450 GB/s each way); a link past LINK_SATURATED of that is saturated.
PCIE_BYTES_PER_SECOND: Final = 64e9
NVLINK_BYTES_PER_SECOND: Final = 450e9
LINK_SATURATED: Final = 0.8
# Data-parallel ranks diverge when the slowest's median step is this many times the fastest's.
RANK_SPREAD: Final = 1.5

# Which path each latency histogram Governor knows lies on: the verdict splits the latency of an
# SLO on one of these (not a whole request's duration, not a ratio).
PATHS: Final[dict[str, Latency]] = {
    service.INTER_TOKEN_LATENCY.name: Latency.ITL,
    vllm.INTER_TOKEN_LATENCY.name: Latency.ITL,
    service.TIME_TO_FIRST_TOKEN.name: Latency.TTFT,
    vllm.TIME_TO_FIRST_TOKEN.name: Latency.TTFT,
}

_BY_NAME: Final = {cause.name: cause for cause in CAUSES}


def by_name(name: str) -> Cause:
    """The cause called ``name``; a ``KeyError`` naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no cause {name!r}: one of {', '.join(NAMES)}") from None
