"""The little of ASGI that Governor's code in vLLM's server needs: types, headers, bodies.

Both ways into vLLM (:mod:`.middleware`, :mod:`.endpoint`) stay pure ASGI: nothing here wraps a
response's ``send``, so a stream vLLM writes never passes through Governor's code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from governor.vllm.admin import Answer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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
