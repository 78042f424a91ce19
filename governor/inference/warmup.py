"""Warm-up: a few requests through the engine before the service reports ready.

A fresh engine serves its first requests slower than the rest: lazily built kernels, caches and
buffers are paid for by whichever request comes first. ``governor serve`` sends a few requests of
its own once the engine has started and only then answers 200 on ``/health``, so the first
client's request, and a scale-out's, finds the engine warm. The requests go to the engine
directly, never through the HTTP routes, so the service's own series (``governor_requests_total``
and the latency histograms, the SLIs) never count them; the engine's own ``vllm:*`` series do,
as they count everything the engine runs. Prompt sizes come from the spec's request classes (the
prompt-token bounds their matches name) beside a small default set::

    >>> prompt_sizes(RequestClasses(), max_model_len=4096, max_tokens=16)
    (16, 256)
    >>> from governor.slo.classes import Match
    >>> doc = RequestClass("doc", (Match(min_prompt_tokens=3000),))
    >>> prompt_sizes(RequestClasses((doc, RequestClass("chat")), declared=True), 2048, 16)
    (16, 256, 2032)
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Final

from governor.inference.engines.base import Engine, GenerateRequest, SamplingOptions
from governor.slo.classes import RequestClass, RequestClasses

log = logging.getLogger(__name__)

# Without classes naming sizes: a short prompt, and one long enough to take a real prefill.
DEFAULT_PROMPT_TOKENS: Final = (16, 256)
# Classes may name up to 128 sizes (16 classes, 8 matches each); the warm-up keeps this many,
# the smallest and the largest among them.
MAX_SIZES: Final = 8
MAX_ROUNDS: Final = 16
# A word most tokenizers split into one or two tokens; the prompt is cut to its size in tokens.
_FILLER: Final = " warm"


@dataclass(frozen=True, slots=True)
class WarmupSettings:
    """``rounds`` passes over the prompt sizes, one request at a time (0: no warm-up), each
    request asking for ``max_tokens`` output tokens."""

    rounds: int = 2
    max_tokens: int = 16

    def __post_init__(self) -> None:
        if not 0 <= self.rounds <= MAX_ROUNDS:
            raise ValueError(f"warm-up rounds must be in 0..{MAX_ROUNDS}, got {self.rounds}")
        if self.max_tokens < 1:
            raise ValueError(f"warm-up max_tokens must be positive, got {self.max_tokens}")


@dataclass(frozen=True, slots=True)
class WarmupResult:
    """How long the warm-up took, and its first and last round's slowest time to first token
    (``None`` without a warm-up)."""

    seconds: float
    first_round_ttft_seconds: float | None = None
    last_round_ttft_seconds: float | None = None


def _named_sizes(request_class: RequestClass) -> list[int]:
    return [size for match in request_class.match
            for size in (match.min_prompt_tokens if match.min_prompt_tokens is not None
                         else match.max_prompt_tokens,) if size is not None]


def prompt_sizes(classes: RequestClasses, max_model_len: int, max_tokens: int
                 ) -> tuple[int, ...]:
    """The prompt sizes (tokens) to warm up with: the defaults and each size a class's match
    names (its lower bound, else its upper), each cut to what fits the context beside
    ``max_tokens``; at most :data:`MAX_SIZES`, evenly spread, smallest and largest kept."""
    room = max(1, max_model_len - max_tokens)
    named = [size for c in classes.classes for size in _named_sizes(c)]
    sizes = sorted({max(1, min(size, room)) for size in (*DEFAULT_PROMPT_TOKENS, *named)})
    if len(sizes) <= MAX_SIZES:
        return tuple(sizes)
    step = (len(sizes) - 1) / (MAX_SIZES - 1)
    return tuple(sizes[round(i * step)] for i in range(MAX_SIZES))


def _prompt(engine: Engine, size: int, max_tokens: int, label: str) -> GenerateRequest:
    """A prompt of exactly ``size`` tokens, starting with ``label`` so that no two warm-up
    requests share a prefix (a prefix-cache hit would skip the prefill being warmed)."""
    text = label + _FILLER * size
    ids = list(engine.tokenize(text))
    while len(ids) < size:  # a tokenizer that merged the filler
        ids += ids or [0]
    return GenerateRequest(f"warmup-{label}", text, tuple(ids[:size]), max_tokens,
                           sampling=SamplingOptions(temperature=0.0, ignore_eos=True))


async def _one(engine: Engine, request: GenerateRequest) -> float:
    """Run one request to its end; its time to first token."""
    started, first = time.perf_counter(), None
    async for _delta in engine.generate(request):
        if first is None:
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


async def warm_up(engine: Engine, settings: WarmupSettings, classes: RequestClasses
                  ) -> WarmupResult:
    """Send the warm-up requests one at a time; an engine error fails the start-up."""
    started = time.perf_counter()
    if settings.rounds == 0:
        return WarmupResult(0.0)
    sizes = prompt_sizes(classes, engine.max_model_len, settings.max_tokens)
    slowest: list[float] = []
    for round_ in range(settings.rounds):
        ttfts = []
        for size in sizes:
            request = await asyncio.to_thread(_prompt, engine, size, settings.max_tokens,
                                              f"{round_}.{size}")
            ttfts.append(await _one(engine, request))
        slowest.append(max(ttfts))
        log.info("warm-up round %d/%d: prompts of %s tokens, slowest first token %.3f s",
                 round_ + 1, settings.rounds, ", ".join(map(str, sizes)), slowest[-1])
    return WarmupResult(time.perf_counter() - started, slowest[0], slowest[-1])

