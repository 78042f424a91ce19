"""The drills' clients against a tiny aiohttp server: a slow reader makes the server's writes
wait, a slow body arrives in pieces, a plain client is neither."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH
from governor.drills.clients import parse_status, request_head, send, trickle
from governor.drills.workload import SlowBody, SlowReader

BODY = {"model": "m", "messages": [{"role": "user", "content": "word " * 200}]}
# What the streaming handler writes: enough to fill the buffers between it and a slow reader.
CHUNK = b"data: " + b"x" * 1018 + b"\n\n"
CHUNKS = 1024


class Server:
    """Records how long the handler waited on its writes, and when each body piece arrived."""

    def __init__(self) -> None:
        self.write_wait_seconds = 0.0
        self.body_arrivals: list[float] = []
        self.body_bytes = 0

    async def stream(self, request: web.Request) -> web.StreamResponse:
        async for piece in request.content.iter_any():
            self.body_arrivals.append(time.monotonic())
            self.body_bytes += len(piece)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(CHUNKS):
            started = time.monotonic()
            await response.write(CHUNK)
            self.write_wait_seconds += time.monotonic() - started
        await response.write_eof()
        return response


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    recorder = Server()
    app = web.Application()
    app.router.add_post(CHAT_COMPLETIONS_PATH, recorder.stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield recorder, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_plain_client_reads_everything_without_making_the_server_wait(
        server: tuple[Server, str]) -> None:
    recorder, url = server
    async with aiohttp.ClientSession() as session:
        outcome = await send(session, url, BODY)
    assert outcome.ok
    assert recorder.write_wait_seconds < 0.5


async def test_a_slow_reader_makes_the_server_s_writes_wait(server: tuple[Server, str]) -> None:
    recorder, url = server
    reader = SlowReader(read_bytes=16384, pause_seconds=0.05)
    async with aiohttp.ClientSession() as session:
        outcome = await send(session, url, BODY, reader)
    assert outcome.ok, outcome
    # 1 MiB read 16 KiB per 50 ms takes at least 3 s; past what the buffers between them hold
    # (a few hundred KiB on loopback, even so), the server's writes waited for the reader.
    assert outcome.seconds > 3.0
    assert recorder.write_wait_seconds > 1.0


async def test_a_slow_body_arrives_in_pieces_over_its_pauses(server: tuple[Server, str]) -> None:
    recorder, url = server
    slow = SlowBody(chunk_bytes=512, pause_seconds=0.1)
    async with aiohttp.ClientSession() as session:
        outcome = await send(session, url, BODY, slow)
    assert outcome.ok, outcome
    pieces = -(-recorder.body_bytes // 512)
    assert len(recorder.body_arrivals) >= pieces - 1  # the server reads them one by one
    assert recorder.body_arrivals[-1] - recorder.body_arrivals[0] >= 0.1 * (pieces - 1) * 0.9


async def test_a_refused_connection_is_an_outcome_not_an_exception() -> None:
    async with aiohttp.ClientSession() as session:
        outcome = await send(session, "http://127.0.0.1:9", BODY)
        slow = await send(session, "http://127.0.0.1:9", BODY, SlowReader())
    assert outcome.status == slow.status == 0
    assert outcome.error and slow.error


async def test_trickle_cuts_a_body_into_its_chunks() -> None:
    started = time.monotonic()
    pieces = [piece async for piece in trickle(b"abcdefghij", SlowBody(4, 0.02))]
    assert pieces == [b"abcd", b"efgh", b"ij"]
    assert time.monotonic() - started >= 0.04


def test_the_request_head_and_status_line() -> None:
    head = request_head("127.0.0.1", 8000, 42)
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"Content-Length: 42\r\n" in head and head.endswith(b"\r\n\r\n")
    assert parse_status(b"HTTP/1.1 429 Too Many Requests\r\n") == 429
    with pytest.raises(ValueError, match="not an HTTP status line"):
        parse_status(b"garbage")


async def test_a_cancelled_slow_reader_closes_its_connection(server: tuple[Server, str]) -> None:
    _, url = server
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(send(session, url, BODY, SlowReader(256, 1.0, 4096)))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
