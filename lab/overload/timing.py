"""A timing middleware for the lab: when each generation request reached vLLM's app, when its
body was in, and when its answer's last byte was handed to the server, as JSON lines in
``GOVERNOR_LAB_TIMING_FILE``.

``vllm serve --middleware governor.vllm.AdminMiddleware --middleware
lab.overload.timing.Timing``: vLLM adds the middleware named last outermost, so the time runs
from the request's arrival at the app (its headers parsed by uvicorn) to the last ``send`` of
its answer, the gate's and vLLM's work included, uvicorn's reading of the headers not.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from governor.contracts.endpoints import GENERATION_PATHS

FILE_ENV = "GOVERNOR_LAB_TIMING_FILE"


class Timing:
    def __init__(self, app: Any) -> None:
        self.app = app
        path = os.environ.get(FILE_ENV, "")
        # A line is appended in one write (microseconds): no file object on the event loop.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if path else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        fd = self._fd
        if fd is None or scope["type"] != "http" or scope.get("path") not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()
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
                line = {"status": status, "seconds": time.perf_counter() - arrived,
                        "body_seconds": body_in}
                os.write(fd, (json.dumps(line) + "\n").encode())

        await self.app(scope, received, timed)
