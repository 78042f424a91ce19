"""The traffic of a drill, as data: who sends what, how often, and how each client behaves.

A :class:`Workload` is a few :class:`Traffic` classes, each open-loop (Poisson arrivals at
``rate_per_second``) or closed-loop (``concurrency`` clients, each sending its next request when
its last ends). A class's clients may read their streams slowly (:class:`SlowReader`) or send
their bodies slowly (:class:`SlowBody`). ``scaled`` multiplies a workload's rate and clients,
the ``--load-scale`` of a drill::

    >>> chats = Traffic("chats", prompt_words=(20, 80), max_tokens=(100, 300), rate_per_second=3)
    >>> Workload((chats,)).scaled(0.5).traffic[0].rate_per_second
    1.5
    >>> len(prompt(random.Random(1), 100).split())
    100
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Final

# Everyday words of four to nine letters: about 1.5 simulated tokens and 7 bytes each.
WORDS: Final = (
    "the", "committee", "will", "review", "annual", "report", "and", "publish", "its",
    "findings", "next", "week", "while", "translators", "prepare", "every", "chapter", "in",
    "three", "languages", "budget", "river", "station", "garden", "winter", "market", "letter",
    "quiet", "engine", "morning", "harbour", "signal", "window", "travel", "kitchen", "bridge",
)
SYSTEM_PROMPT: Final = "Translate into French."


@dataclass(frozen=True, slots=True)
class SlowReader:
    """A client that reads its stream ``read_bytes`` at a time, ``pause_seconds`` apart, through
    a receive buffer of ``receive_buffer_bytes`` and segments of ``segment_bytes``: once the
    buffers between it and the server are full, the server's writes wait for it.

    On loopback the kernel still grows the server's send buffer to 0.7-1.3 MB per connection
    (measured with BBR, 1460-byte segments and a 1 KiB window), so the server's writes wait
    only now and then, and its inter-token histogram hardly shows them (docs/drills.md).
    """

    read_bytes: int = 4096
    pause_seconds: float = 0.5
    receive_buffer_bytes: int = 1024
    segment_bytes: int = 1460


@dataclass(frozen=True, slots=True)
class SlowBody:
    """A client that sends its request body ``chunk_bytes`` at a time, ``pause_seconds`` apart
    (chunked transfer encoding), then reads the answer as any client does."""

    chunk_bytes: int = 256
    pause_seconds: float = 0.3


Behaviour = SlowReader | SlowBody | None


@dataclass(frozen=True, slots=True)
class Traffic:
    """One class of requests: its prompts and answers (inclusive ranges), its arrivals, its
    clients. Exactly one of ``rate_per_second`` (open loop) or ``concurrency`` (closed loop)."""

    name: str
    prompt_words: tuple[int, int]
    max_tokens: tuple[int, int]
    rate_per_second: float = 0.0
    concurrency: int = 0
    stream: bool = True
    client: Behaviour = None
    # Closed loop: the clients start one after another over this many seconds, not at once.
    ramp_seconds: float = 1.0

    def __post_init__(self) -> None:
        if (self.rate_per_second > 0) == (self.concurrency > 0):
            raise ValueError(f"traffic {self.name!r}: give a rate or a concurrency, not both")
        for what, (low, high) in (("prompt_words", self.prompt_words),
                                  ("max_tokens", self.max_tokens)):
            if not 1 <= low <= high:
                raise ValueError(f"traffic {self.name!r}: {what} must be 1 <= low <= high")

    def scaled(self, factor: float) -> Traffic:
        """This class with ``factor`` times its rate or its clients (one client at least)."""
        if self.rate_per_second:
            return replace(self, rate_per_second=self.rate_per_second * factor)
        return replace(self, concurrency=max(1, math.ceil(self.concurrency * factor)))

    def describe(self) -> str:
        """``chats: 3/s open loop, prompts 20-80 words, 100-300 tokens, streamed``."""
        arrivals = (f"{self.rate_per_second:g}/s open loop" if self.rate_per_second
                    else f"{self.concurrency} clients closed loop"
                    + (f" (starting over {self.ramp_seconds:g} s)" if self.ramp_seconds > 1
                       else ""))
        how = "streamed" if self.stream else "not streamed"
        if isinstance(self.client, SlowReader):
            how += (f", read {self.client.read_bytes} B every {self.client.pause_seconds:g} s "
                    f"through a {self.client.receive_buffer_bytes} B receive buffer and "
                    f"{self.client.segment_bytes} B segments")
        elif isinstance(self.client, SlowBody):
            how += (f", bodies sent {self.client.chunk_bytes} B every "
                    f"{self.client.pause_seconds:g} s")
        return (f"{self.name}: {arrivals}, prompts {_span(self.prompt_words)} words, "
                f"{_span(self.max_tokens)} tokens, {how}")


def _span(bounds: tuple[int, int]) -> str:
    low, high = bounds
    return f"{low}" if low == high else f"{low}-{high}"


@dataclass(frozen=True, slots=True)
class Workload:
    traffic: tuple[Traffic, ...] = ()

    def scaled(self, factor: float) -> Workload:
        return Workload(tuple(t.scaled(factor) for t in self.traffic))

    def describe(self) -> list[str]:
        return [t.describe() for t in self.traffic]


def prompt(rng: random.Random, words: int) -> str:
    """``words`` random everyday words: a prompt no other shares a prefix with (beyond a few
    words), so the engine's prefix cache does not shorten its prefill."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def request_body(traffic: Traffic, model: str, rng: random.Random) -> dict[str, object]:
    """One chat completion request of ``traffic``, drawn from ``rng``."""
    words = rng.randint(*traffic.prompt_words)
    body: dict[str, object] = {
        "model": model, "stream": traffic.stream, "max_tokens": rng.randint(*traffic.max_tokens),
        "ignore_eos": True,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                     {"role": "user", "content": prompt(rng, words)}]}
    return body
