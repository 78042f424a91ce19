"""A client that goes away mid-stream has its engine request aborted: running → 0, KV freed."""

from __future__ import annotations

import asyncio

import aiohttp

from governor.contracts.metrics import service as svc
from governor.contracts.metrics import vllm
from tests.inference.conftest import Service


def engine_gauge(service: Service, name: str) -> float:
    value = service.sample(name, {vllm.LABEL_MODEL: service.engine.model_name,
                                  vllm.LABEL_ENGINE: "0"})
    assert value is not None, name
    return value


async def test_disconnect_mid_stream_aborts_the_engine_request(service: Service) -> None:
    body = {"model": service.engine.model_name, "stream": True,
            "max_tokens": service.engine.max_model_len - 200,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "a long long answer " * 20}]}
    session = aiohttp.ClientSession()
    response = await session.post(f"{service.url}/v1/chat/completions", json=body)
    assert response.status == 200, await response.text()
    for _ in range(5):
        await response.content.readline()
    await asyncio.sleep(0.05)
    assert service.engine.stats().num_requests_running == 1
    kv_busy = service.engine.stats().kv_cache_usage_ratio
    assert kv_busy > 0
    response.close()
    await session.close()

    for _ in range(200):
        if service.engine.stats().num_requests_running == 0:
            break
        await asyncio.sleep(0.01)
    stats = service.engine.stats()
    assert stats.num_requests_running == 0
    assert stats.kv_cache_usage_ratio < kv_busy
    await asyncio.sleep(0.1)  # a step or two for the gauges
    assert engine_gauge(service, vllm.NUM_REQUESTS_RUNNING.name) == 0.0
    assert engine_gauge(service, vllm.KV_CACHE_USAGE.name) < kv_busy
    assert service.sample(svc.REQUESTS.total,
                          {"route": "/v1/chat/completions", "code": "499",
                           "class": svc.DEFAULT_CLASS}) == 1.0
    assert service.sample(svc.REQUESTS_IN_FLIGHT.name) == 0.0
