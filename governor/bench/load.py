"""A streaming load generator for OpenAI-compatible servers, closed- or open-loop.

Closed loop (``concurrency=N``): N clients, each sending its next request when the last ends.
Open loop (``rate=R``): Poisson arrivals at R requests/s whatever the server does, up to
``max_outstanding`` in flight. Each response is streamed and timed token by token at the client::

    result = asyncio.run(run_load(LoadSpec(url="http://127.0.0.1:8000", model="m",
                                           concurrency=16, requests=200)))
    print(summarize(result))
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np


@dataclass(frozen=True, slots=True)
class LoadSpec:
    url: str
    model: str
    requests: int = 100
    concurrency: int | None = 16
    rate: float | None = None
    max_outstanding: int = 1024
    prompt: str = "Translate into French: the committee will meet again next week."
    # One prompt per request, in order (cycled when shorter); empty: ``prompt`` for every one.
    prompts: tuple[str, ...] = ()
    max_tokens: int = 64
    chat: bool = True
    ignore_eos: bool = True
    seed: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give exactly one of concurrency (closed loop) or rate (open loop)")


@dataclass(slots=True)
class RequestResult:
    status: int
    start: float
    end: float = 0.0
    ttft: float | None = None
    itls: list[float] = field(default_factory=list)
    tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


@dataclass(slots=True)
class LoadResult:
    spec: LoadSpec
    results: list[RequestResult]
    wall_seconds: float


def _body(spec: LoadSpec, index: int = 0) -> dict[str, Any]:
    prompt = spec.prompts[index % len(spec.prompts)] if spec.prompts else spec.prompt
    body: dict[str, Any] = {"model": spec.model, "max_tokens": spec.max_tokens, "stream": True,
                            "ignore_eos": spec.ignore_eos,
                            "stream_options": {"include_usage": True}}
    if spec.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


async def _one(session: aiohttp.ClientSession, spec: LoadSpec, path: str,
               body: dict[str, Any]) -> RequestResult:
    result = RequestResult(status=0, start=time.perf_counter())
    last = result.start
    try:
        async with session.post(spec.url + path, json=body, headers=spec.headers) as response:
            result.status = response.status
            if response.status != 200:
                result.error = (await response.text())[:200]
                return result
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    result.tokens = chunk["usage"]["completion_tokens"]
                if not _has_text(chunk):
                    continue
                now = time.perf_counter()
                if result.ttft is None:
                    result.ttft = now - result.start
                else:
                    result.itls.append(now - last)
                last = now
    except (aiohttp.ClientError, TimeoutError) as exc:
        result.error = repr(exc)
    finally:
        result.end = time.perf_counter()
    return result


def _has_text(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


async def run_load(spec: LoadSpec) -> LoadResult:
    path = "/v1/chat/completions" if spec.chat else "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    results: list[RequestResult] = []
    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if spec.concurrency is not None:
            remaining = iter(range(spec.requests))

            async def worker() -> None:
                for index in remaining:
                    results.append(await _one(session, spec, path, _body(spec, index)))

            await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        else:
            assert spec.rate is not None
            rng = random.Random(spec.seed)
            gate = asyncio.Semaphore(spec.max_outstanding)
            tasks = []

            async def gated(index: int) -> None:
                async with gate:
                    results.append(await _one(session, spec, path, _body(spec, index)))

            for index in range(spec.requests):
                tasks.append(asyncio.create_task(gated(index)))
                await asyncio.sleep(rng.expovariate(spec.rate))
            await asyncio.gather(*tasks)
    return LoadResult(spec, results, time.perf_counter() - start)


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    array = np.asarray(values)
    return {"p50": float(np.percentile(array, 50)), "p99": float(np.percentile(array, 99))}


def summarize(load: LoadResult) -> dict[str, Any]:
    ok = [r for r in load.results if r.ok]
    tokens = sum(r.tokens for r in ok)
    itls = [x for r in ok for x in r.itls]
    return {
        "requests": len(load.results),
        "ok": len(ok),
        "errors": len(load.results) - len(ok),
        "wall_seconds": load.wall_seconds,
        "output_tokens_per_second": tokens / load.wall_seconds if load.wall_seconds else 0.0,
        "requests_per_second": len(ok) / load.wall_seconds if load.wall_seconds else 0.0,
        "ttft_seconds": _quantiles([r.ttft for r in ok if r.ttft is not None]),
        "itl_seconds": _quantiles(itls),
        "latency_seconds": _quantiles([r.end - r.start for r in ok]),
    }
