"""What each drill injects: one row per cause of :mod:`governor.contracts.causes` (``unknown``
aside), and ``healthy``, which injects nothing.

Every drill starts with the same healthy load (:data:`HEALTHY`: chats at a moderate rate, which
burns no SLO). At its onset a drill sets faults on the simulated GPU (``faults``: the body of
``PUT /admin/sim/faults``), adds traffic (``workload``), or both. Some need the stack set up
for them, and say so in their output and JSON line:

* ``background``: traffic beside the healthy load from the start, within every SLO on its own,
  that the cause then pushes over (a slowed GPU still decodes a few chats in ~10-20 ms: it
  breaches a 120 ms SLO only where long prompts' prefill chunks share the chats' steps; a KV
  cache kept ~75% full overflows within seconds of more sequences decoding);
* ``serve``: options of the drill's ``governor serve`` (the queue drill caps the engine so that
  this machine's clients can outrun it);
* ``itl_threshold_seconds``: the drill runs on a copy of the spec whose inter-token SLO has this
  threshold, an edge of both inter-token histograms. On the simulated H200 a decode step takes
  41 ms at most (the whole KV cache read from DRAM), so a memory-bound decode cannot breach the
  default 120 ms: the SLO is set where this workload's latency sits.

Drills whose cause lives between the client and ``governor serve`` (slow readers, slow bodies)
are invisible to a stock-vLLM spec, which reads vLLM's own histograms (``stock_vllm`` False).
So is a slow tokenizer here: real vLLM stamps a request's arrival before it renders the prompt,
so its first-token time holds the text work (and vLLM >= 0.34 records it, which the verdict
reads), but the simulated engine behind ``governor serve`` stamps it when the tokens reach it
and records no render time::

    >>> by_name("gpu_throttled").faults["clock_reasons"]
    ('hw_thermal',)
    >>> [d.name for d in DRILLS if not d.stock_vllm]
    ['tokenizer', 'client_stream', 'request_read']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from governor.contracts import causes
from governor.drills.workload import SlowBody, SlowReader, Traffic, Workload

HEALTHY_NAME: Final = "healthy"
GIB: Final = 1024**3

# Chats at a moderate rate: about ten streams decoding at once on the simulated H200, far from
# any SLO (measured on a 2-core machine beside the rest of the stack: docs/drills.md).
HEALTHY: Final = Workload((
    Traffic("chats", prompt_words=(20, 80), max_tokens=(100, 300), rate_per_second=3.0),))


@dataclass(frozen=True, slots=True)
class Drill:
    name: str
    summary: str  # what is injected, in a line
    faults: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    workload: Workload = field(default_factory=Workload)
    # Traffic beside the healthy load from the start, within every SLO: what the fault then
    # pushes over the SLO (a moderate load of chats alone never comes near it).
    background: Workload = field(default_factory=Workload)
    serve: tuple[str, ...] = ()  # more governor serve options, as its command line spells them
    itl_threshold_seconds: float | None = None
    stock_vllm: bool = True  # whether a stock-vLLM spec can see this cause at all
    note: str = ""

    @property
    def cause(self) -> str | None:
        """The cause the verdict should lead with; None for ``healthy`` (no verdict at all)."""
        return None if self.name == HEALTHY_NAME else self.name


def _faults(**values: object) -> Mapping[str, object]:
    return MappingProxyType(values)


# Long prompts (~2,800 tokens, the chat class) beside the chats: each prefill chunk takes ~65 ms
# of a step the chats share, within their 120 ms SLO; ~150 ms on a GPU slowed to 40% of its speed.
_PROMPTS: Final = Workload((Traffic("long prompts", prompt_words=(2000, 2100), max_tokens=(16, 64),
                                    rate_per_second=3.0, stream=False),))

DRILLS: Final = (
    Drill("batching", "long documents arrive beside the chats at vLLM's default token budget: "
                      "their prefill chunks stall the chats' decode steps",
          workload=Workload((Traffic("documents", prompt_words=(5500, 6000), max_tokens=(16, 64),
                                     rate_per_second=3.0, stream=False),))),
    Drill("kv_cache", "150 more sequences with long answers join a KV cache that long "
                      "prompts keep ~75% full: it overflows within seconds and the engine "
                      "preempts",
          workload=Workload((Traffic("long answers", prompt_words=(60, 100),
                                     max_tokens=(3000, 5000), concurrency=150, stream=False,
                                     ramp_seconds=5.0),)),
          background=Workload((Traffic("long contexts", prompt_words=(2000, 2100),
                                       max_tokens=(200, 2000), concurrency=100, stream=False,
                                       ramp_seconds=40.0),)),
          serve=("--preset", "llama-3-8b@h100"),
          note="the engine runs the llama-3-8b@h100 preset (the same model on an H100, a "
               "449k-token KV cache, half the H200's): 250 sequences outgrow it, where the "
               "H200's would take 500, more than this machine's CPU simulates in real time"),
    Drill("queue", "requests arrive well past what the engine serves: they wait in its queue",
          workload=Workload((Traffic("backlog", prompt_words=(20, 80), max_tokens=(300, 500),
                                     rate_per_second=12.0, stream=False),)),
          serve=("--max-num-seqs", "32"),
          note="the engine starts with max_num_seqs 32 so that this machine's clients can "
               "outrun it"),
    Drill("gpu_compute_bound", "~2,800-token prompts arrive at 20/s, a quarter past what the "
                               "GPU prefills (~45k tokens/s): every step is a full prefill "
                               "chunk, the SMs and tensor pipes saturated, and requests wait",
          workload=Workload((Traffic("prefill", prompt_words=(2000, 2100), max_tokens=(1, 4),
                                     rate_per_second=20.0, stream=False),))),
    Drill("gpu_memory_bound", "280 sequences decoding long answers after short prompts "
                              "(starting over 30 s): every step reads the weights and a KV "
                              "cache of up to ~700k tokens from DRAM",
          workload=Workload((Traffic("long decodes", prompt_words=(60, 100),
                                     max_tokens=(2000, 2500), concurrency=280, stream=False,
                                     ramp_seconds=30.0),)),
          itl_threshold_seconds=0.025),
    Drill("gpu_throttled", "the GPU's SM clock held at 40% of its maximum by a thermal "
                           "slowdown",
          faults=_faults(clock_ratio=0.4, clock_reasons=("hw_thermal",)),
          background=_PROMPTS),
    Drill("gpu_shared", "another process takes 60% of the GPU's SM time and 20 GiB of its "
                        "memory",
          faults=_faults(cotenant_sm_ratio=0.6, cotenant_memory_bytes=20 * GIB),
          background=_PROMPTS),
    Drill("gpu_fault", "the GPU raises XID 48 (double-bit ECC) with an uncorrected error every "
                       "20 s, stalling the engine 3 s each time",
          faults=_faults(xid=48, ecc_uncorrected_per_xid=1, stall_seconds=3.0)),
    Drill("interconnect", "others' traffic takes 90% of the GPU's links: every step waits on "
                          "the link",
          faults=_faults(link_ratio=0.9)),
    Drill("tokenizer", "the tokenizer slows to 0.3 s per KiB of prompt while prompts of a few "
                       "KiB arrive",
          faults=_faults(tokenize_seconds_per_kib=0.3),
          workload=Workload((Traffic("long prompts", prompt_words=(500, 700),
                                     max_tokens=(50, 100), rate_per_second=2.0),)),
          stock_vllm=False),
    Drill("client_stream", "24 clients read long streams 4 KiB every 0.5 s through a 1 KiB "
                           "receive buffer: the server's writes wait for them",
          workload=Workload((Traffic("slow readers", prompt_words=(20, 40),
                                     max_tokens=(2500, 3500), concurrency=24,
                                     client=SlowReader(), ramp_seconds=10.0),)),
          stock_vllm=False),
    Drill("request_read", "clients send their bodies 128 bytes every 0.2 s: the first-token "
                          "clock runs before the prompt is in hand",
          workload=Workload((Traffic("slow bodies", prompt_words=(100, 200),
                                     max_tokens=(50, 100), rate_per_second=2.0,
                                     client=SlowBody(128, 0.2)),)),
          serve=("--body-timeout", "10s"),
          stock_vllm=False,
          note="the service starts with --body-timeout 10s (1 s by default turns slow bodies "
               "away with 408 before they can burn the first-token SLO)"),
    Drill(HEALTHY_NAME, "nothing: the healthy load alone"),
)
NAMES: Final = tuple(d.name for d in DRILLS)
_BY_NAME: Final = {d.name: d for d in DRILLS}
# Every cause has its drill (unknown is what the verdict says when none holds).
assert set(NAMES) == {c.name for c in causes.CAUSES if c is not causes.UNKNOWN} | {HEALTHY_NAME}


class UnknownDrill(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def by_name(name: str) -> Drill:
    """The drill called ``name``; :class:`UnknownDrill` naming every drill otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownDrill(f"no drill {name!r}: one of {', '.join(NAMES)}") from None
