"""A deterministic analytical stand-in for an engine under the document-translation load.

Used by the law's sequence tests to run hours of fake time in milliseconds. It models the physics
measured on the H200 (docs/h200-measurements.md): decode steps of ``base + per_seq * running``;
a document's prompt arrives as ``ceil(tokens / budget)`` mixed steps of ``decode + cost *
chunk``; the tail is a spike only when mixed steps exceed ``1 - quantile`` of all steps. The
closed loop on the real simulator is in ``test_closed_loop_virtual.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from governor.controller.model import Limits, Observation


@dataclass(frozen=True)
class Plant:
    docs_per_second: float = 2.0
    doc_tokens: int = 6000
    chat_running: int = 64
    decode_base_seconds: float = 0.0048
    seconds_per_seq: float = 0.00002
    cost_seconds_per_token: float = 25e-6
    quantile: float = 0.99
    kv_tokens: int = 800_000
    context_tokens: int = 2000

    def observe(self, limits: Limits) -> Observation:
        running = min(limits.max_num_seqs, self.chat_running)
        waiting = max(0, self.chat_running - limits.max_num_seqs)
        median = self.decode_base_seconds + self.seconds_per_seq * running
        chunks = math.ceil(self.doc_tokens / limits.max_num_batched_tokens)
        chunk = min(self.doc_tokens, limits.max_num_batched_tokens)
        spike = median + self.cost_seconds_per_token * chunk
        mixed_per_second = self.docs_per_second * chunks
        busy = mixed_per_second * spike
        decode_steps = max(0.0, 1.0 - busy) / median
        fraction = mixed_per_second / (mixed_per_second + decode_steps) if busy < 1 else 1.0
        tail = spike if fraction > 1 - self.quantile else median * 1.15
        ttft = chunks * spike * (1.0 if busy < 0.8 else 1.0 / max(1e-3, 1.0 - busy) * 0.2)
        kv = min(1.0, running * self.context_tokens / self.kv_tokens)
        return Observation(
            itl_tail_seconds=tail,
            itl_median_seconds=median,
            itl_tail_long_seconds=tail,
            itl_spike_seconds=spike if self.docs_per_second > 0 else median * 1.3,
            ttft_tail_seconds=ttft if self.docs_per_second > 0 else median * 2,
            prompt_tokens_per_second=self.docs_per_second * self.doc_tokens + 200.0 * 10,
            generation_tokens_per_second=running / median,
            requests_running=float(running),
            requests_waiting=float(waiting),
            waiting_growth_per_second=0.0,
            kv_cache_usage_ratio=kv,
            preemptions_per_second=0.0,
        )
