"""A fake HTTP API on a free local port, for tests of commands that read one (Prometheus, the
controller): a ``BaseHTTPRequestHandler`` subclass answers, :func:`send_json` writes its body."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that does not log each request to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def send_json(handler: BaseHTTPRequestHandler, data: Any) -> None:
    """Answer 200 with ``data`` as JSON."""
    body = json.dumps(data).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` on 127.0.0.1 and a free port, on a thread; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
