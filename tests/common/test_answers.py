"""The blocking reader the command-line tools ask their sources with (``governor status``,
``governor up``'s story, the drills, the Prometheus client): whole, bounded, JSON."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from governor.common.answers import AnswerError, get_json

LIMIT = 1024


@dataclass
class Source:
    url: str
    body: bytes = b""


@pytest.fixture
def source() -> Iterator[Source]:
    """A source answering every GET with its ``body``, in 100-byte writes (a reader that took
    the first network read for the answer would cut it)."""
    answer = Source("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            for start in range(0, len(answer.body), 100):
                self.wfile.write(answer.body[start:start + 100])
                self.wfile.flush()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    answer.url = f"http://127.0.0.1:{server.server_address[1]}/"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield answer
    finally:
        server.shutdown()
        server.server_close()


def test_an_answer_at_its_limit_is_read_whole(source: Source) -> None:
    source.body = b'{"pad": "' + b"x" * (LIMIT - 11) + b'"}'
    assert len(source.body) == LIMIT
    assert get_json(source.url, limit=LIMIT, timeout=5) == {"pad": "x" * (LIMIT - 11)}


def test_an_answer_past_its_limit_is_refused_by_its_size_not_as_broken_json(
        source: Source) -> None:
    source.body = b'{"pad": "' + b"x" * LIMIT + b'"}'
    with pytest.raises(AnswerError, match=f"larger than {LIMIT} bytes"):
        get_json(source.url, limit=LIMIT, timeout=5)


@pytest.mark.parametrize(("body", "message"), [
    (b"<html>", "not JSON"),
    (b"[" * 100 + b"]" * 100, "nested too deeply"),
])
def test_an_answer_no_tool_can_hold_is_refused(source: Source, body: bytes,
                                               message: str) -> None:
    source.body = body
    with pytest.raises(AnswerError, match=message):
        get_json(source.url, limit=LIMIT, timeout=5)
