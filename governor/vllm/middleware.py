"""``vllm serve --middleware governor.vllm.AdminMiddleware``: the admin API on any vLLM.

vLLM adds a class named by ``--middleware`` with ``app.add_middleware(cls)``, no arguments, so
the settings come from the environment (:class:`governor.vllm.admin.AdminSettings`). It is a
pure ASGI middleware: a request for ``/admin/batching`` is answered here, and every other one is
handed to vLLM's app untouched, without wrapping its ``receive`` or ``send``, so it never sits on
the streaming path (Starlette's ``BaseHTTPMiddleware`` would wrap every stream).

User middleware runs outermost, before vLLM's ``--api-key`` check (which guards only ``/v1``
and a few other prefixes): the route's own bearer token guards it. The engine is the app's
``state.engine_client``, there once vLLM has initialised its state.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from governor.contracts.endpoints import ADMIN_BATCHING_PATH
from governor.vllm.admin import AdminRoute, AdminSettings, Answer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class AdminMiddleware:
    """Answers ``GET``/``PUT /admin/batching``; passes everything else straight through."""

    def __init__(self, app: ASGIApp, settings: AdminSettings | None = None) -> None:
        self.app = app
        self.route = AdminRoute(settings or AdminSettings.from_env(os.environ))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != ADMIN_BATCHING_PATH:
            await self.app(scope, receive, send)
            return
        answer = await self._answer(scope, receive)
        await send_answer(send, answer)

    async def _answer(self, scope: Scope, receive: Receive) -> Answer:
        app = scope.get("app")
        engine_client = getattr(getattr(app, "state", None), "engine_client", None)
        return await self.route.answer_request(scope["method"], header(scope, b"authorization"),
                                               body_chunks(receive), engine_client)


async def body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's chunks as ASGI delivers them, up to the last one or a disconnect."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


async def send_answer(send: Send, answer: Answer) -> None:
    body = answer.json()
    await send({"type": "http.response.start", "status": answer.status,
                "headers": [*answer.headers(), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
