"""A paced stream waits for its reader: the kernel holds at most a capped send buffer of it.

Without pacing, loopback lets one slow connection queue most of a megabyte in the kernel, so the
service's writes (and its inter-token clock) run far ahead of what the client has read. Paced,
the handler cannot get more than a few tens of kilobytes ahead; its connection gets its own
settings back when the stream ends; and a reader that keeps up is never made to wait.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.inference.http.timeouts import ClientWriter

CHUNK = b"x" * 1024
CHUNKS = 2048  # 2 MiB
SEND_BUFFER = 16 * 1024


def make_app(send_buffer: int, written: list[int],
             limits: list[tuple[int, int]]) -> web.Application:
    async def stream(request: web.Request) -> web.StreamResponse:
        writer = ClientWriter(request, web.StreamResponse(), 10.0, send_buffer)
        await writer.prepare()
        try:
            for _ in range(CHUNKS):
                await writer.write(CHUNK)
                written[0] += len(CHUNK)
            await writer.write_eof()
        finally:
            writer.unpace()
        return writer.response

    async def plain(request: web.Request) -> web.Response:
        assert request.transport is not None
        limits.append(request.transport.get_write_buffer_limits())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/stream", stream)
    app.router.add_get("/plain", plain)
    return app


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, list[int], list[tuple[int, int]]]]:
    written: list[int] = [0]
    limits: list[tuple[int, int]] = []
    server = TestServer(make_app(SEND_BUFFER, written, limits))
    await server.start_server()
    assert server.port is not None
    yield server.port, written, limits
    await server.close()


async def _connect(port: int, receive_buffer: int | None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def _read_response(sock: socket.socket, until: bytes) -> bytes:
    loop, got = asyncio.get_running_loop(), b""
    while not got.endswith(until):
        chunk = await loop.sock_recv(sock, 65536)
        assert chunk, "connection closed early"
        got += chunk
    return got


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode()


async def test_a_paced_stream_gets_at_most_its_buffers_ahead_of_a_reader_that_stopped(
        served: tuple[int, list[int], list[tuple[int, int]]]) -> None:
    port, written, _ = served
    sock = await _connect(port, receive_buffer=4096)
    try:
        await asyncio.get_running_loop().sock_sendall(sock, _get("/stream"))
        await asyncio.sleep(1.0)  # not reading
        # The capped send buffer (twice the cap, as Linux counts it), the reader's small window
        # and a chunk in flight: far below the 0.7-1.3 MB loopback queued unpaced.
        assert written[0] <= 128 * 1024, written[0]
        assert written[0] > 0
        await _read_response(sock, b"0\r\n\r\n")  # then everything arrives
        assert written[0] == CHUNKS * len(CHUNK)
    finally:
        sock.close()


async def test_the_connection_gets_its_own_limits_back_after_a_paced_stream(
        served: tuple[int, list[int], list[tuple[int, int]]]) -> None:
    port, _, limits = served
    sock = await _connect(port, receive_buffer=None)
    try:
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, _get("/plain"))
        await _read_response(sock, b"ok")
        await loop.sock_sendall(sock, _get("/stream"))
        await _read_response(sock, b"0\r\n\r\n")
        await loop.sock_sendall(sock, _get("/plain"))  # the same keep-alive connection
        await _read_response(sock, b"ok")
    finally:
        sock.close()
    assert len(limits) == 2 and limits[1] == limits[0] and limits[0][1] > 0


async def test_a_reader_that_keeps_up_is_never_made_to_wait(
        served: tuple[int, list[int], list[tuple[int, int]]]) -> None:
    port, written, _ = served
    sock = await _connect(port, receive_buffer=None)
    try:
        started = time.perf_counter()
        await asyncio.get_running_loop().sock_sendall(sock, _get("/stream"))
        await _read_response(sock, b"0\r\n\r\n")
        elapsed = time.perf_counter() - started
    finally:
        sock.close()
    assert written[0] == CHUNKS * len(CHUNK)
    assert elapsed < 10.0  # 2 MiB over loopback through a 32 KiB buffer: well under a second


def test_the_setting_is_validated() -> None:
    from governor.inference.config import ConnectionSettings, ServiceConfig

    for bad in (-1, 1, 4095, 4 * 1024 * 1024 + 1):
        with pytest.raises(ValueError, match="stream_send_buffer_bytes"):
            ServiceConfig(connections=ConnectionSettings(stream_send_buffer_bytes=bad))
    for good in (0, 4096, 16384, 4 * 1024 * 1024):
        ServiceConfig(connections=ConnectionSettings(stream_send_buffer_bytes=good))
