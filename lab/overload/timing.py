"""A timing middleware for the lab: when each generation request reached vLLM's app, when its
body was in, and when its answer's last byte was handed to the server, as JSON lines in
``GOVERNOR_LAB_TIMING_FILE``.

``vllm serve --middleware governor.vllm.AdminMiddleware --middleware
lab.overload.timing.Timing``: vLLM adds the middleware named last outermost, so ``seconds`` runs
from the request's arrival at the app (its headers parsed by uvicorn, its task started) to the
last ``send`` of its answer, the gate's and vLLM's work included. ``since_first_byte_seconds``
runs from the moment vLLM's process parsed the request's first bytes (uvicorn's httptools
parser starting the message, stamped by this module when vLLM imports it) to the same end:
the request's whole time in the service, the wait for its task to run included.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from governor.contracts.endpoints import GENERATION_PATHS

FILE_ENV = "GOVERNOR_LAB_TIMING_FILE"
FIRST_BYTE = "governor.lab.first_byte"


def _stamp_first_bytes() -> None:
    """Stamp each request's scope with when uvicorn's parser began it (lab use only)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # another server: no stamp, the time from the app's call only
        return
    begin = HttpToolsProtocol.on_message_begin

    def on_message_begin(self: Any) -> None:
        at = time.perf_counter()
        begin(self)
        self.scope.setdefault("extensions", {})[FIRST_BYTE] = at

    HttpToolsProtocol.on_message_begin = on_message_begin  # type: ignore[method-assign]


class Timing:
    def __init__(self, app: Any) -> None:
        self.app = app
        path = os.environ.get(FILE_ENV, "")
        if path:
            _stamp_first_bytes()
        # A line is appended in one write (microseconds): no file object on the event loop.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if path else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        fd = self._fd
        if fd is None or scope["type"] != "http" or scope.get("path") not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()
        first_byte = (scope.get("extensions") or {}).get(FIRST_BYTE)
        status, body_in = 0, None

        async def received() -> Any:
            nonlocal body_in
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body"):
                body_in = time.perf_counter() - arrived
            return message

        async def timed(message: Any) -> None:
            nonlocal status
            await send(message)
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                end = time.perf_counter()
                line = {"status": status, "seconds": end - arrived, "body_seconds": body_in,
                        "since_first_byte_seconds": None if first_byte is None
                        else end - first_byte}
                os.write(fd, (json.dumps(line) + "\n").encode())

        await self.app(scope, received, timed)
