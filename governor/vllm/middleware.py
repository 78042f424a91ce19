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

import asyncio
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from governor.contracts.endpoints import ADMIN_BATCHING_PATH
from governor.contracts.errors import INVALID_REQUEST, error_body
from governor.vllm.admin import MAX_BODY_BYTES, AdminRoute, AdminSettings, Answer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A body that has not arrived by then is abandoned (408): a client cannot hold the route.
BODY_SECONDS: Final = 10.0


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
        try:
            body = await asyncio.wait_for(read_body(receive), BODY_SECONDS)
        except TooLarge:
            return Answer(413, error_body(f"the body is larger than {MAX_BODY_BYTES} bytes",
                                          INVALID_REQUEST))
        except TimeoutError:
            return Answer(408, error_body("the body did not arrive in time", INVALID_REQUEST))
        app = scope.get("app")
        engine_client = getattr(getattr(app, "state", None), "engine_client", None)
        return await self.route.answer(scope["method"], header(scope, b"authorization"), body,
                                       engine_client)


class TooLarge(Exception):
    pass


async def read_body(receive: Receive, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refused past ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


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
