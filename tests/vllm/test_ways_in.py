"""The two ways into vLLM's app, on a real FastAPI app like vLLM's: the middleware answers its one
path and hands everything else on untouched; the endpoint plugin adds the same route."""

from __future__ import annotations

import asyncio
from argparse import Namespace
from types import SimpleNamespace
from typing import Any

import pytest

# FastAPI and httpx come with vLLM, not with make venv-test's virtualenv (make unit, make
# test-compose): there this module is skipped, not an error at collection.
pytest.importorskip("fastapi", reason="FastAPI comes with vLLM (make venv-vllm)")
pytest.importorskip("httpx", reason="httpx comes with vLLM (make venv-vllm)")

import httpx
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from governor.common.secrets import Secret
from governor.vllm import AdminMiddleware, admin
from governor.vllm.admin import AdminSettings
from governor.vllm.endpoint import AdminEndpoints
from tests.vllm.test_admin import AUTH, TOKEN, Core, Engine

SETTINGS = AdminSettings(Secret(TOKEN))


def vllm_like_app(engine_client: Any) -> FastAPI:
    app = FastAPI()
    app.state.engine_client = engine_client

    @app.get("/v1/stream")
    async def stream() -> StreamingResponse:
        async def chunks() -> Any:
            for i in range(3):
                yield f"data: {i}\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return app


def http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://vllm")


async def test_the_middleware_answers_the_admin_path_from_the_apps_engine() -> None:
    core = Core([Engine(0)])
    app = vllm_like_app(SimpleNamespace(engine_core=core))
    app.add_middleware(AdminMiddleware, settings=SETTINGS)
    async with http(app) as client:
        put = await client.put("/admin/batching", json={"max_num_seqs": 4},
                               headers={"Authorization": AUTH})
        get = await client.get("/admin/batching", headers={"Authorization": AUTH})
        refused = await client.get("/admin/batching")
    assert put.status_code == 200 and put.json()["max_num_seqs"] == 4
    assert get.json()["max_num_seqs"] == 4
    assert refused.status_code == 401
    assert put.headers["content-type"] == "application/json"


async def test_everything_else_goes_to_vllm_with_its_own_receive_and_send() -> None:
    seen: list[tuple[Any, Any]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append((receive, send))

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        return None

    wrapped = AdminMiddleware(inner, settings=SETTINGS)
    for scope in ({"type": "http", "path": "/v1/chat/completions", "method": "POST"},
                  {"type": "http", "path": "/admin/batching/x", "method": "GET"},
                  {"type": "websocket", "path": "/admin/batching"},
                  {"type": "lifespan"}):
        await wrapped(scope, receive, send)
    assert seen == [(receive, send)] * 4  # the very same callables: nothing on the stream


async def test_a_stream_passes_through_the_middleware_unchanged() -> None:
    app = vllm_like_app(None)
    app.add_middleware(AdminMiddleware, settings=SETTINGS)
    async with http(app) as client:
        answer = await client.get("/v1/stream")
    assert answer.text == "data: 0\n\ndata: 1\n\ndata: 2\n\n"


async def test_an_oversized_or_stalled_body_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    app = vllm_like_app(SimpleNamespace(engine_core=Core([Engine(0)])))
    app.add_middleware(AdminMiddleware, settings=SETTINGS)
    async with http(app) as client:
        big = await client.put("/admin/batching", content=b"x" * (65 * 1024),
                               headers={"Authorization": AUTH})
    assert big.status_code == 413

    monkeypatch.setattr(admin, "BODY_SECONDS", 0.05)
    sent: list[Any] = []

    async def stalled() -> dict[str, Any]:
        await asyncio.sleep(10)
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    wrapped = AdminMiddleware(app, settings=SETTINGS)
    await wrapped({"type": "http", "path": "/admin/batching", "method": "PUT",
                   "headers": [(b"authorization", AUTH.encode())]}, stalled, send)
    assert sent[0]["status"] == 408


async def test_the_endpoint_plugin_reads_the_body_as_the_middleware_does() -> None:
    plugin = AdminEndpoints(SETTINGS)
    app = vllm_like_app(None)
    plugin.attach_router(app)
    await plugin.init_state(SimpleNamespace(engine_core=Core([Engine(0)])), app.state,
                            Namespace())
    async with http(app) as client:
        big = await client.put("/admin/batching", content=b"x" * (65 * 1024),
                               headers={"Authorization": AUTH})
    assert big.status_code == 413


async def test_the_endpoint_plugin_adds_the_same_route_and_takes_the_engine_at_init() -> None:
    core = Core([Engine(0), Engine(1)])
    plugin = AdminEndpoints(SETTINGS)
    app = vllm_like_app(None)
    plugin.attach_router(app)
    async with http(app) as client:
        before = await client.get("/admin/batching", headers={"Authorization": AUTH})
        await plugin.init_state(SimpleNamespace(engine_core=core), app.state, Namespace())
        put = await client.put("/admin/batching", json={"max_num_batched_tokens": 256},
                               headers={"Authorization": AUTH})
        wrong = await client.get("/admin/batching", headers={"Authorization": "Bearer x"})
    assert before.status_code == 503  # no engine yet: a clear answer, not a crash
    assert put.status_code == 200
    assert [rank["max_num_batched_tokens"] for rank in put.json()["ranks"]] == [256, 256]
    assert wrong.status_code == 401
    assert (plugin.name, plugin.required_tasks) == ("governor_admin", ("generate",))
