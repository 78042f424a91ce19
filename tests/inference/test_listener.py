"""The listener: a cap on open connections, refusals that cost nothing, idle ones closed."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from governor.common.process import Child
from governor.inference.app import create_app
from governor.inference.config import ConnectionSettings, ServiceConfig
from governor.inference.engines.settings import EngineSettings
from governor.inference.listener import REFUSAL, Listener, listening

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ServiceConfig(engine=EngineSettings(kind="sim", preset="tiny"))


@pytest.fixture
async def connections() -> AsyncIterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


async def connect(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def read_all(sock: socket.socket) -> bytes:
    loop, data = asyncio.get_running_loop(), b""
    while chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), 5):
        data += chunk
    return data


async def eventually(condition: Callable[[], bool]) -> None:
    for _ in range(250):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


async def healthy(listener: Listener) -> int:
    async with aiohttp.ClientSession() as session, session.get(
        f"http://127.0.0.1:{listener.port}/health"
    ) as response:
        return response.status


async def test_past_the_cap_a_connection_is_refused_at_once_and_the_rest_are_served(
    connections: list[socket.socket], caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(CONFIG, env={})
    async with listening(app, "127.0.0.1", 0, ConnectionSettings(max_connections=3)) as listener:
        await eventually(lambda: listener.cap.open == 0)
        connections.extend([await connect(listener.port) for _ in range(3)])
        await eventually(lambda: listener.cap.open == 3)
        with caplog.at_level(logging.WARNING, "governor.inference.listener"):
            extra = [await connect(listener.port) for _ in range(5)]
            connections.extend(extra)
            # The fixed 503, then the end of the connection: nothing was read or parsed.
            assert [await read_all(sock) for sock in extra] == [REFUSAL] * 5
        assert listener.cap.refused == 5
        assert len([r for r in caplog.records if "connections refused" in r.message]) == 1
        connections.pop(0).close()
        await eventually(lambda: listener.cap.open == 2)
        assert await healthy(listener) == 200


async def test_a_connection_that_never_sends_a_request_does_not_keep_its_place() -> None:
    app = create_app(CONFIG, env={})
    settings = ConnectionSettings(max_connections=1, keepalive_timeout_seconds=0.3)
    async with listening(app, "127.0.0.1", 0, settings) as listener:
        idle = await connect(listener.port)
        try:
            await eventually(lambda: listener.cap.open == 1)
            assert await read_all(idle) == b""  # closed by the service, not refused
            await eventually(lambda: listener.cap.open == 0)
            assert await healthy(listener) == 200
        finally:
            idle.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.integration
def test_governor_serve_caps_connections_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    child = Child(
        "serve", [sys.executable, "-m", "governor", "serve", "--engine", "sim", "--preset",
                  "tiny", "--host", "127.0.0.1", "--port", str(port)],
        f"http://127.0.0.1:{port}/health", tmp_path / "serve.log",
        env={**os.environ, "GOVERNOR_SERVE_MAX_CONNECTIONS": "2", "PYTHONPATH": str(ROOT)},
        cwd=ROOT)
    with child:
        child.wait_healthy()
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        try:
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", port)) as refused:
                refused.settimeout(5)
                assert refused.recv(65536).startswith(b"HTTP/1.1 503 ")
        finally:
            for sock in held:
                sock.close()
        assert child.stop() == 0, child.tail()
