"""The live drills: each cause of a latency SLO burn injected into a real engine, as data.

``governor drill`` proves the verdict on the simulated engine, whose GPU takes faults through an
admin API. On a real GPU nothing is simulated: every cause here is real traffic on real vLLM, or
(``gpu_shared``) a second process of our own doing bf16 matrix multiplies on the same GPU. Every
drill starts with the same healthy load (:data:`HEALTHY`: streamed chats that burn no SLO) and
adds, at its onset, its ``workload``, its co-tenant, or both. Some need more:

* ``background``: traffic beside the healthy load from the start, within every SLO on its own,
  that the cause then pushes over. A co-tenant slows a chat's ~6 ms decode step to a few times
  that, still far inside a 120 ms SLO: it breaches only where ~2,600-token prompts' prefill
  steps (~65 ms alone) share the chats' steps;
* ``limits``: batching limits set through the admin API at the onset (the engine serves every
  drill, so a drill that needs a small engine lowers its limits live): the queue drill caps the
  engine at 32 sequences so that arrivals outrun it. Set before the warm-up instead, they would
  not last: the controller relaxes limits below the engine's ceiling while nothing breaches.

Prompt lengths are in tokens: the load generator writes prompts of whole-word tokens
(:class:`lab.live.replay.PromptBook`), so ``prompt_words`` of a :class:`Traffic` is exact.
Every prompt stays under the default spec's 3,000-token ``doc`` class except the batching
drill's documents, which are that class on purpose::

    >>> by_name("queue").limits
    {'max_num_seqs': 32}
    >>> [d.name for d in DRILLS if d.cotenant_gib]
    ['gpu_shared']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from governor.drills.workload import Traffic, Workload

HEALTHY_NAME: Final = "healthy"

# Streamed chats: about a dozen decoding at once on an H100 or H200, ITL ~6 ms, TTFT ~30 ms.
HEALTHY: Final = Workload((
    Traffic("chats", prompt_words=(200, 800), max_tokens=(100, 300), rate_per_second=6.0),))


@dataclass(frozen=True)
class LiveDrill:
    name: str
    summary: str  # what is injected, in a line
    workload: Workload = field(default_factory=Workload)  # added at the onset
    background: Workload = field(default_factory=Workload)  # beside the healthy load throughout
    limits: Mapping[str, int] | None = None  # set at the onset; None: the ceiling throughout
    cotenant_gib: float = 0.0  # a second process's bf16 matmuls and memory, from the onset
    note: str = ""

    @property
    def cause(self) -> str | None:
        """The cause the verdict should lead with; None for ``healthy`` (no verdict at all)."""
        return None if self.name == HEALTHY_NAME else self.name

    def describe(self) -> dict[str, Any]:
        """What the drill injects, for its JSON line."""
        return {"summary": self.summary, "traffic": self.workload.describe(),
                "background": self.background.describe(),
                "limits": dict(self.limits) if self.limits else None,
                "cotenant_gib": self.cotenant_gib, "healthy": HEALTHY.describe()}


DRILLS: Final = (
    LiveDrill(HEALTHY_NAME, "nothing: the healthy chats alone"),
    LiveDrill("batching", "6,000-7,000-token documents arrive at 2.5/s beside the chats at "
                          "vLLM's default token budget: each is one ~200 ms prefill step that "
                          "every decoding chat waits for",
              workload=Workload((Traffic("documents", prompt_words=(6000, 7000),
                                         max_tokens=(16, 64), rate_per_second=2.5,
                                         stream=False),))),
    LiveDrill("kv_cache", "100 clients keep long contexts decoding long answers (1,200-1,800 "
                          "prompt and 1,500-2,500 answer tokens each, ~350k tokens in all) in "
                          "a KV cache that holds far fewer: vLLM preempts",
              workload=Workload((Traffic("long contexts", prompt_words=(1200, 1800),
                                         max_tokens=(1500, 2500), concurrency=100,
                                         stream=False, ramp_seconds=5.0),)),
              note="needs an engine whose KV cache holds well under 350k tokens (started with "
                   "num_gpu_blocks_override): the result's environment gives the engine's "
                   "arguments"),
    LiveDrill("queue", "max_num_seqs drops to 32 and requests arrive at 30/s, past what 32 "
                       "sequences serve (~13/s): they wait in the engine's queue",
              workload=Workload((Traffic("backlog", prompt_words=(200, 600),
                                         max_tokens=(300, 500), rate_per_second=30.0,
                                         stream=False),)),
              limits={"max_num_seqs": 32},
              note="max_num_seqs is set to 32 through the admin API at the onset, so that the "
                   "arrivals outrun the engine"),
    LiveDrill("gpu_shared", "a second process of ours allocates 16 GiB and runs bf16 matrix "
                            "multiplies in a loop on the same GPU",
              background=Workload((Traffic("long prompts", prompt_words=(2500, 2700),
                                           max_tokens=(16, 64), rate_per_second=3.0,
                                           stream=False),)),
              cotenant_gib=16.0),
)
NAMES: Final = tuple(d.name for d in DRILLS)
_BY_NAME: Final = {d.name: d for d in DRILLS}


def by_name(name: str) -> LiveDrill:
    """The drill called ``name``; a ``KeyError`` naming every drill otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no live drill {name!r}: one of {', '.join(NAMES)}") from None
