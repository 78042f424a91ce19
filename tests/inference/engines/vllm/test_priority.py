"""Request classes on the real engine: a class's priority reaches vLLM, whose priority policy
schedules a later request of a higher class (lower value) before an earlier one of a lower class.

The shared engine runs one request at a time for these tests, so the two wait side by side in
vLLM's waiting queue; its own timestamps (``recent_timings``) say who was scheduled first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import prometheus_client
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, CLASS_HEADER
from governor.inference.app import create_app
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import BatchingLimits, Engine, GenerateRequest
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.vllm.convert import RequestTiming
from governor.inference.engines.vllm.engine import VllmEngine
from governor.inference.engines.vllm.metrics import VllmMetricsBridge
from governor.inference.warmup import WarmupSettings
from governor.slo.classes import Match, RequestClass, RequestClasses
from tests.inference.engines.vllm.conftest import (
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    SERVED_MODEL_NAME,
)
from tests.inference.engines.vllm.test_engine import GREEDY, collect, make_request
from tests.inference.engines.vllm.test_service import Lent

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]

BLOCKER_TOKENS = 160  # long enough for the others to queue behind it


@pytest_asyncio.fixture(loop_scope="session")
async def one_at_a_time(vllm_engine: VllmEngine) -> AsyncIterator[VllmEngine]:
    await vllm_engine.set_limits(BatchingLimits(1, MAX_NUM_BATCHED_TOKENS))
    try:
        yield vllm_engine
    finally:
        await vllm_engine.set_limits(BatchingLimits(MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS))


async def until_running(engine: VllmEngine) -> None:
    for _ in range(2000):
        if engine.stats().num_requests_running >= 1:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the blocking request never started")


def timings(engine: VllmEngine, *ids: str) -> list[RequestTiming]:
    found = {t.request_id: t for t in engine.recent_timings()}
    return [found[i] for i in ids]


async def queue_behind_a_blocker(engine: VllmEngine, first: GenerateRequest,
                                 second: GenerateRequest) -> list[RequestTiming]:
    """``first`` then ``second`` arrive while a long request runs alone; their timings."""
    blocker = make_request(max_tokens=BLOCKER_TOKENS)
    running = asyncio.create_task(collect(engine, blocker))
    await until_running(engine)
    waiting = [asyncio.create_task(collect(engine, first))]
    await asyncio.sleep(0.05)  # `first` is in vLLM's queue before `second` arrives
    waiting.append(asyncio.create_task(collect(engine, second)))
    await asyncio.gather(running, *waiting)
    return timings(engine, first.request_id, second.request_id)


def with_priority(request: GenerateRequest, priority: int) -> GenerateRequest:
    return GenerateRequest(request.request_id, request.prompt, request.prompt_token_ids,
                           request.max_tokens, request.sampling, priority=priority)


async def test_a_later_request_of_a_higher_class_is_scheduled_first(
        one_at_a_time: VllmEngine) -> None:
    low = with_priority(make_request(max_tokens=4), 10)
    high = with_priority(make_request(max_tokens=4), 0)
    low_t, high_t = await queue_behind_a_blocker(one_at_a_time, low, high)
    assert low_t.queued_ts < high_t.queued_ts  # low arrived first…
    assert high_t.scheduled_ts < low_t.scheduled_ts  # …and high ran first


async def test_equal_priorities_keep_their_order_of_arrival(
        one_at_a_time: VllmEngine) -> None:
    first, second = make_request(max_tokens=4), make_request(max_tokens=4)
    first_t, second_t = await queue_behind_a_blocker(one_at_a_time, first, second)
    assert first_t.scheduled_ts < second_t.scheduled_ts


# ---- through the service: a class's priority on the HTTP path -----------------------------------

CLASSES = RequestClasses((
    RequestClass("doc", (Match(headers=((CLASS_HEADER, ("doc",)),)),), priority=10),
    RequestClass("chat")), declared=True)


@pytest_asyncio.fixture(loop_scope="session")
async def classed_url(one_at_a_time: VllmEngine, engine_settings: EngineSettings
                      ) -> AsyncIterator[str]:
    def lend(_config: ServiceConfig, registry: CollectorRegistry) -> Engine:
        registry.register(VllmMetricsBridge(prometheus_client.REGISTRY))
        return cast(Engine, Lent(one_at_a_time))

    # No warm-up: its requests would run beside the ones whose order is tested.
    config = ServiceConfig(engine=engine_settings, classes=CLASSES, warmup=WarmupSettings(0))
    server = TestServer(create_app(config, engine_factory=lend, env={}))
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def chat(session: aiohttp.ClientSession, url: str, max_tokens: int,
               headers: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"model": SERVED_MODEL_NAME, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": GREEDY.temperature, "messages": [{"role": "user", "content": "hi"}]}
    async with session.post(f"{url}{CHAT_COMPLETIONS_PATH}", json=body,
                            headers=headers) as response:
        assert response.status == 200, await response.text()
        reply: dict[str, Any] = await response.json()
        return reply


async def test_the_service_hands_vllm_the_priority_of_each_class(
        classed_url: str, one_at_a_time: VllmEngine) -> None:
    async with aiohttp.ClientSession() as session:
        blocker = asyncio.create_task(chat(session, classed_url, BLOCKER_TOKENS))
        await until_running(one_at_a_time)
        doc = asyncio.create_task(chat(session, classed_url, 4, {CLASS_HEADER: "doc"}))
        await asyncio.sleep(0.05)
        later_chat = asyncio.create_task(chat(session, classed_url, 4))
        replies = await asyncio.gather(blocker, doc, later_chat)
    doc_t, chat_t = timings(one_at_a_time, replies[1]["id"], replies[2]["id"])
    assert doc_t.queued_ts < chat_t.queued_ts
    assert chat_t.scheduled_ts < doc_t.scheduled_ts
