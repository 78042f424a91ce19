"""Replay a workload's arrivals against an OpenAI-compatible server, timing every streamed event.

The controller benchmark scores a run from each request's arrival and the times its outputs
reached the caller. On the simulator those come from virtual time; against a real server this
module produces the same thing over HTTP: each arrival is sent at its own time (open loop, so a
slow server does not slow the arrivals down), as a completion whose prompt is exactly
``prompt_tokens`` tokens and whose answer is exactly ``output_tokens`` (EOS ignored), and the
client records when each streamed event arrived::

    prompts = PromptBook.from_words(words_of(tokenizer_vocab))
    traces = asyncio.run(replay(url, "model", arrivals, prompts))
    outcomes = [t.outcome(q=0.99) for t in traces]       # scoring.RequestOutcome

Prompts are random words that each encode to one token, both with a byte-level BPE vocabulary's
``Ġword`` entries and with the simulated engine's tokenizer (words of three to six letters), so
the prompt length is exact without tokenizing on the client.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from governor.bench.api import Arrival, RequestOutcome, request_tail

# The simulated engine's tokenizer makes one token of a space and up to six letters.
WORD_LENGTHS = range(3, 7)


def words_of(vocab: Iterable[str]) -> list[str]:
    """Words that a byte-level BPE vocabulary holds whole, with their leading space (``Ġ``)."""
    return sorted({token[1:] for token in vocab if token.startswith("Ġ") and token[1:].isascii()
                   and token[1:].isalpha() and token[1:].islower()
                   and len(token) - 1 in WORD_LENGTHS})


def replica_of(index: int, replicas: int) -> int:
    """The replica the ``index``-th arrival goes to: round-robin, as a balancer in front of the
    replicas would send them (written for the harness; the product ships no balancer)."""
    return index % replicas


SIM_WORDS = tuple(f"{a}{b}{c}" for a in "bdfgklmnprstvz" for b in "aeiou" for c in "bdgklmnprst")


@dataclass(frozen=True)
class PromptBook:
    """Random prompts of exact token lengths, reproducible from a seed."""

    words: tuple[str, ...]

    @classmethod
    def from_words(cls, words: Sequence[str]) -> PromptBook:
        if len(words) < 16:
            raise ValueError(f"need at least 16 single-token words, got {len(words)}")
        return cls(tuple(words))

    def prompt(self, tokens: int, seed: int) -> str:
        rng = random.Random(seed)
        return "".join(" " + rng.choice(self.words) for _ in range(tokens))


@dataclass
class Trace:
    """One request as the client saw it; times are seconds since the replay started."""

    kind: str
    arrival: float  # when the workload said it arrives
    sent: float = math.nan  # when it was actually sent
    token_times: list[float] = field(default_factory=list)  # one per streamed output event
    status: int = 0
    finished: bool = False  # the stream ended with a finish reason
    output_tokens: int = 0  # from the final usage
    prompt_tokens: int = 0  # from the final usage
    error: str | None = None

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.arrival if self.token_times else math.nan

    def outcome(self, q: float) -> RequestOutcome:
        """The scoring's view, exactly as the simulated runs produce it."""
        return RequestOutcome(self.arrival, self.kind, self.ttft,
                              request_tail(self.token_times, q), self.finished)

    def as_row(self) -> list[Any]:
        """Compact form for results files: kind, arrival, status, finished, tokens, times."""
        return [self.kind, round(self.arrival, 4), self.status, self.finished,
                self.output_tokens, [round(t, 4) for t in self.token_times]]

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Trace:
        kind, arrival, status, finished, tokens, times = row
        return cls(kind, float(arrival), float(arrival), [float(t) for t in times], int(status),
                   bool(finished), int(tokens))


async def _stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                  trace: Trace, t0: float) -> None:
    trace.sent = time.perf_counter() - t0
    try:
        async with session.post(url, json=body) as response:
            trace.status = response.status
            if response.status != 200:
                trace.error = (await response.text())[:200]
                return
            async for raw in response.content:
                if not raw.startswith(b"data: ") or raw.startswith(b"data: [DONE]"):
                    continue
                now = time.perf_counter() - t0
                chunk = json.loads(raw[6:])
                usage = chunk.get("usage")
                if usage:
                    trace.output_tokens = int(usage.get("completion_tokens", 0))
                    trace.prompt_tokens = int(usage.get("prompt_tokens", 0))
                for choice in chunk.get("choices") or ():
                    if choice.get("text"):
                        trace.token_times.append(now)
                    if choice.get("finish_reason"):
                        trace.finished = True
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        trace.error = repr(exc)


async def replay(url: str | Sequence[str], model: str, arrivals: Sequence[Arrival],
                 prompts: PromptBook, *, seed: int = 0, headers: dict[str, str] | None = None,
                 drain_seconds: float = 120.0) -> list[Trace]:
    """Send every arrival at its time; returns one :class:`Trace` per arrival, in order.

    ``url`` may name several replicas: the ``i``-th arrival goes to replica ``i mod n``, the
    round-robin a balancer in front of them would do. Requests still streaming
    ``drain_seconds`` after the last arrival are cut off (their trace says so: not finished)."""
    urls = [url] if isinstance(url, str) else list(url)
    endpoints = [u.rstrip("/") + "/v1/completions" for u in urls]
    traces = [Trace(a.kind, a.at) for a in arrivals]
    bodies = [{"model": model, "prompt": prompts.prompt(a.prompt_tokens, seed * 1_000_003 + i),
               "max_tokens": a.output_tokens, "ignore_eos": True, "stream": True,
               "temperature": 0.0, "stream_options": {"include_usage": True}}
              for i, a in enumerate(arrivals)]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers=headers) as session:
        t0 = time.perf_counter()
        tasks = []
        for index, (arrival, body, trace) in enumerate(zip(arrivals, bodies, traces,
                                                           strict=True)):
            delay = arrival.at - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            endpoint = endpoints[replica_of(index, len(endpoints))]
            tasks.append(asyncio.create_task(_stream(session, endpoint, body, trace, t0)))
        end = (arrivals[-1].at if arrivals else 0.0) + drain_seconds
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, end - (time.perf_counter() - t0)))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return traces
