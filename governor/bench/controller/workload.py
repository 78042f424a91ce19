"""The document-translation workload: chats decoding continuously while long documents arrive.

Chat requests arrive as a Poisson stream at a steady rate and decode a few hundred tokens each,
so a few dozen requests are always decoding. Documents — several thousand prompt tokens each —
arrive as a Poisson stream whose rate follows a schedule: a quiet start, a **load step**, a
**ramp** to the peak, and a drop back to quiet. Every prefill chunk of a document stalls every
decoding chat for one step (REFERENCE.md §6); at vLLM's default budget on an H200 (8192), the
step and the ramp make those stalls frequent enough to breach the 120 ms inter-token P99.

>>> w = Workload.headline()
>>> [round(w.doc_rate(t), 2) for t in (0.0, w.step_at + 1, w.ramp_end + 1, w.drop_at + 1)]
[0.5, 1.3, 1.9, 0.5]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    prompt_tokens: int
    output_tokens: int
    kind: str  # "chat" | "doc"


@dataclass(frozen=True, slots=True)
class Workload:
    duration_seconds: float
    chat_per_second: float
    chat_prompt: tuple[int, int]
    chat_output: tuple[int, int]
    doc_prompt: tuple[int, int]
    doc_output: tuple[int, int]
    base_doc_per_second: float
    step_doc_per_second: float
    peak_doc_per_second: float
    step_at: float
    ramp_start: float
    ramp_end: float
    drop_at: float

    @classmethod
    def headline(cls, minutes: float = 40.0) -> Workload:
        """The benchmark's scenario over ``minutes``; each phase keeps its share of the run."""
        d = minutes * 60.0
        return cls(
            duration_seconds=d, chat_per_second=12.0, chat_prompt=(200, 1200),
            chat_output=(150, 450), doc_prompt=(4000, 7500), doc_output=(200, 500),
            base_doc_per_second=0.5, step_doc_per_second=1.3, peak_doc_per_second=1.9,
            step_at=0.15 * d, ramp_start=0.45 * d, ramp_end=0.6 * d, drop_at=0.8 * d,
        )

    def scaled(self, factor: float) -> Workload:
        """Every arrival rate times ``factor`` (a rehearsal on a smaller engine)."""
        if not factor > 0:
            raise ValueError(f"the rate factor must be positive, got {factor}")
        return replace(self, chat_per_second=self.chat_per_second * factor,
                       base_doc_per_second=self.base_doc_per_second * factor,
                       step_doc_per_second=self.step_doc_per_second * factor,
                       peak_doc_per_second=self.peak_doc_per_second * factor)

    def doc_rate(self, t: float) -> float:
        """Documents per second at time ``t``: base, step, ramp up, hold, drop."""
        if t < self.step_at or t >= self.drop_at:
            return self.base_doc_per_second
        if t < self.ramp_start:
            return self.step_doc_per_second
        if t < self.ramp_end:
            share = (t - self.ramp_start) / (self.ramp_end - self.ramp_start)
            return self.step_doc_per_second + share * (
                self.peak_doc_per_second - self.step_doc_per_second)
        return self.peak_doc_per_second

    def arrivals(self, seed: int) -> list[Arrival]:
        """Every request of the run, in arrival order; the same ``seed`` gives the same list."""
        rng = np.random.default_rng(seed)
        chats = _poisson(rng, lambda _t: self.chat_per_second, self.chat_per_second,
                         self.duration_seconds)
        peak = max(self.base_doc_per_second, self.step_doc_per_second, self.peak_doc_per_second)
        docs = _poisson(rng, self.doc_rate, peak, self.duration_seconds)
        out = [Arrival(t, _uniform(rng, self.chat_prompt), _uniform(rng, self.chat_output),
                       "chat") for t in chats]
        out += [Arrival(t, _uniform(rng, self.doc_prompt), _uniform(rng, self.doc_output), "doc")
                for t in docs]
        return sorted(out, key=lambda a: a.at)


def _poisson(rng: np.random.Generator, rate: Callable[[float], float], peak: float,
             end: float) -> list[float]:
    """A non-homogeneous Poisson process by thinning (Lewis and Shedler); ``rate <= peak``."""
    times: list[float] = []
    t = 0.0
    while True:
        t += float(rng.exponential(1.0 / peak))
        if t >= end:
            return times
        if float(rng.random()) * peak <= rate(t):
            times.append(t)


def _uniform(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))

