"""A client that goes away mid-stream has its engine request aborted: running → 0, KV freed;
one that goes away before its whole response is sent is counted 499, without a traceback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.contracts.metrics import service as svc
from governor.contracts.metrics import vllm
from governor.inference import keys
from governor.inference.app import create_app
from governor.inference.config import ServiceConfig
from governor.inference.engines.settings import EngineSettings
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



async def test_a_client_gone_as_its_whole_response_is_sent_is_a_499_without_a_traceback(
    aiohttp_server: Callable[..., Awaitable[TestServer]], caplog: pytest.LogCaptureFixture,
) -> None:
    """The client's end of the connection arrives just as a whole (non-streamed) response is
    ready: the transport is closing, and the service finds out as it writes. (Here the handler
    closes it, as the client's FIN does; the cancellation that follows comes too late.)"""
    app = create_app(ServiceConfig(engine=EngineSettings(kind="sim", preset="tiny")), env={})

    async def answered_as_the_client_leaves(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()
        return web.json_response({"object": "list", "data": []})

    app.router.add_get("/leaving", answered_as_the_client_leaves)
    server = await aiohttp_server(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /leaving HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing sent
    writer.close()

    def counted(code: str) -> float | None:
        return app[keys.REGISTRY].get_sample_value(
            svc.REQUESTS.total, {"route": "/leaving", "code": code, "class": svc.UNCLASSIFIED})

    for _ in range(100):
        if counted("499") is not None or counted("200") is not None:
            break
        await asyncio.sleep(0.01)
    assert (counted("499"), counted("200")) == (1.0, None)
    assert not [record for record in caplog.records
                if record.levelno >= logging.ERROR or record.exc_info]
