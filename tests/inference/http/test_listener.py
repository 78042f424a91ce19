"""The listener: caps on open connections (in all, and per client address), refusals that cost
nothing, /health and /metrics answered past the caps, slow headers and bodies cut short."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from governor.common.process import Child, free_port, http_ok
from governor.contracts.metrics import service as svc
from governor.inference import keys
from governor.inference.app import create_app
from governor.inference.config import ConnectionSettings, ServiceConfig
from governor.inference.engines.settings import EngineSettings
from governor.inference.http import listener as listener_module
from governor.inference.http.listener import (
    REFUSALS,
    WAITING_CONNECTIONS,
    Listener,
    listening,
)
from governor.inference.warmup import WarmupSettings

ROOT = Path(__file__).resolve().parents[3]
# No warm-up: /health is asked for at once, and these tests are about connections.
CONFIG = ServiceConfig(engine=EngineSettings(kind="sim", preset="tiny"), warmup=WarmupSettings(0))


@pytest.fixture
async def connections() -> AsyncIterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


GENERATION = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n")
MAX, PER_CLIENT = svc.REASON_MAX_CONNECTIONS, svc.REASON_MAX_CONNECTIONS_PER_CLIENT


async def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection from ``source``: any 127.0.0.0/8 address is a client of its own."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


def refused(app: web.Application, reason: str) -> float:
    value = app[keys.REGISTRY].get_sample_value(svc.CONNECTIONS_REFUSED.total,
                                                {svc.LABEL_REASON: reason})
    assert value is not None  # every reason reads 0 from the start
    return value


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


async def get(listener: Listener, path: str, source: str = "127.0.0.1") -> tuple[int, str]:
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as session, session.get(
        f"http://127.0.0.1:{listener.port}{path}"
    ) as response:
        return response.status, await response.text()


async def healthy(listener: Listener, source: str = "127.0.0.1") -> int:
    return (await get(listener, "/health", source))[0]


async def completion(listener: Listener, source: str) -> int:
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 2}
    async with aiohttp.ClientSession(connector=connector) as session, session.post(
        f"http://127.0.0.1:{listener.port}/v1/completions", json=body
    ) as response:
        await response.read()
        return response.status


async def test_past_the_cap_a_connection_is_refused_at_once_and_the_rest_are_served(
    connections: list[socket.socket], caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(CONFIG, env={})
    async with listening(app, "127.0.0.1", 0, ConnectionSettings(max_connections=3)) as listener:
        await eventually(lambda: listener.book.open == 0)
        connections.extend([await connect(listener.port, f"127.0.0.{n}") for n in (1, 2, 3)])
        await eventually(lambda: listener.book.open == 3)
        with caplog.at_level(logging.WARNING, "governor.inference.http.listener"):
            # Two are read as far as their request line, which asks for neither /health nor
            # /metrics: refused.
            read = [await connect(listener.port, "127.0.0.4") for _ in range(2)]
            connections.extend(read)
            for sock in read:
                sock.send(GENERATION)
            # The fixed 503, then the end of the connection: nothing was parsed.
            assert [await read_all(sock) for sock in read] == [REFUSALS[MAX]] * 2
            # Three that send nothing wait for a request no longer than a probe's takes to
            # arrive, and hold no reserved place meanwhile.
            silent = [await connect(listener.port, "127.0.0.4") for _ in range(3)]
            connections.extend(silent)
            await eventually(lambda: listener.keeper.waiting == 3)
            assert listener.book.reserved_open == 0
            assert [await read_all(sock) for sock in silent] == [REFUSALS[MAX]] * 3
        assert refused(app, MAX) == 5 and listener.keeper.waiting == 0
        # One line at once; the other four are told in one line when the interval ends.
        assert len([r for r in caplog.records if "connection refused" in r.message]) == 1
        connections.pop(0).close()
        await eventually(lambda: listener.book.open == 2)
        assert await healthy(listener) == 200


async def test_a_connection_that_never_sends_a_request_does_not_keep_its_place() -> None:
    app = create_app(CONFIG, env={})
    settings = ConnectionSettings(max_connections=1, keepalive_timeout_seconds=0.3)
    async with listening(app, "127.0.0.1", 0, settings) as listener:
        idle = await connect(listener.port)
        try:
            await eventually(lambda: listener.book.open == 1)
            assert await read_all(idle) == b""  # closed by the service, not refused
            await eventually(lambda: listener.book.open == 0)
            assert await healthy(listener) == 200
        finally:
            idle.close()


async def test_one_client_holds_at_most_its_share_and_another_is_served(
    connections: list[socket.socket],
) -> None:
    app = create_app(CONFIG, env={})
    settings = ConnectionSettings(max_connections=4, max_connections_per_client=2)
    async with listening(app, "127.0.0.1", 0, settings) as listener:
        connections.extend([await connect(listener.port) for _ in range(2)])
        await eventually(lambda: listener.book.open == 2)
        third = await connect(listener.port)
        connections.append(third)
        third.send(GENERATION)
        assert await read_all(third) == REFUSALS[PER_CLIENT]
        assert (refused(app, PER_CLIENT), refused(app, MAX)) == (1, 0)
        assert await completion(listener, "127.0.0.2") == 200
        assert await healthy(listener, "127.0.0.2") == 200


async def test_health_and_metrics_are_answered_when_every_connection_is_held(
    connections: list[socket.socket],
) -> None:
    """Probes and the Prometheus scrape get through whoever holds the connections; one client
    cannot hold the reserved places either."""
    app = create_app(CONFIG, env={})
    settings = ConnectionSettings(max_connections=2)
    async with listening(app, "127.0.0.1", 0, settings) as listener:
        connections.extend([await connect(listener.port, f"127.0.0.{n}") for n in (1, 2)])
        await eventually(lambda: listener.book.open == 2)
        assert await healthy(listener, "127.0.0.3") == 200
        status, exposition = await get(listener, "/metrics?debug=1", "127.0.0.3")
        assert status == 200 and svc.CONNECTIONS_REFUSED.total in exposition
        assert await completion(listener, "127.0.0.3") == 503  # anything else is refused
        await eventually(lambda: listener.book.reserved_open == 0)  # one request each
        # A client whose requests never finish holds no reserved place with them…
        for _ in range(3):
            held = await connect(listener.port, "127.0.0.3")
            held.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            connections.append(held)
        await eventually(lambda: listener.keeper.waiting == 3)
        assert listener.book.reserved_open == 0
        assert await healthy(listener, "127.0.0.3") == 200  # …not even from its own address
        assert await healthy(listener, "127.0.0.4") == 200
        status, _ = await get(listener, "/v1/models", "127.0.0.4")
        assert status == 503
        # A probe has no body: one declared would keep a reserved place while it comes.
        for declared in (b"Content-Length: 10\r\n", b"Transfer-Encoding: chunked\r\n"):
            with_body = await connect(listener.port, "127.0.0.5")
            connections.append(with_body)
            with_body.send(b"GET /health HTTP/1.1\r\nHost: x\r\n" + declared + b"\r\n")
            assert await read_all(with_body) == REFUSALS[MAX]


async def test_trickled_headers_and_silent_connections_lose_their_place_at_the_header_timeout(
    connections: list[socket.socket],
) -> None:
    app = create_app(CONFIG, env={})
    settings = ConnectionSettings(max_connections=8, header_timeout_seconds=0.5)
    async with listening(app, "127.0.0.1", 0, settings) as listener:
        silent = await connect(listener.port)
        trickling = await connect(listener.port)
        connections.extend([silent, trickling])
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\n":
            try:
                await loop.sock_sendall(trickling, bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break  # closed by the service
            await asyncio.sleep(0.05)
        await eventually(lambda: listener.book.open == 0)
        assert time.monotonic() - started < 1.5  # the keep-alive timeout is 75 s
        assert refused(app, svc.REASON_HEADER_TIMEOUT) == 2
        # A connection kept alive between requests is not cut: the timer starts at a
        # request's first byte.
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                async with session.get(f"http://127.0.0.1:{listener.port}/health") as response:
                    assert response.status == 200
                await asyncio.sleep(0.8)
        assert refused(app, svc.REASON_HEADER_TIMEOUT) == 2


async def test_twenty_stalled_bodies_lock_nobody_out(connections: list[socket.socket]) -> None:
    """The red team's: --max-connections 20, and one client's twenty connections that each
    send headers with ``Content-Length: 100``, then ``{"model":`` and nothing more. Everyone
    else, /health and the scrape were refused for as long as the sockets stayed (up to the
    600 s request timeout)."""
    app = create_app(CONFIG, env={})
    settings = ConnectionSettings(max_connections=20, body_timeout_seconds=0.5)
    async with listening(app, "127.0.0.1", 0, settings) as listener:
        started = time.monotonic()
        for _ in range(20):
            sock = await connect(listener.port)
            connections.append(sock)
            with contextlib.suppress(OSError):  # refused ones may be closed already
                sock.send(GENERATION + b'{"model":')
        await eventually(lambda: refused(app, PER_CLIENT) == 10)  # its share is half
        await eventually(lambda: listener.book.reserved_open == 0)
        assert await healthy(listener) == 200  # even from the same address
        assert await completion(listener, "127.0.0.2") == 200
        assert (await get(listener, "/metrics", "127.0.0.3"))[0] == 200
        # The ten with a place are answered 408 and closed within the body timeout, twice.
        await eventually(lambda: listener.book.open == 0)
        assert time.monotonic() - started < 2 * 0.5 + 2.0  # it was 600 s
        counted = app[keys.REGISTRY].get_sample_value(
            svc.REQUESTS.total, {"route": "/v1/completions", "code": "408",
                                 "class": svc.UNCLASSIFIED})
        assert counted == 10


async def test_half_sent_requests_from_many_addresses_cannot_hold_the_reserved_places(
    connections: list[socket.socket],
) -> None:
    """The red team's: two addresses fill the regular places with idle keep-alives; eight
    more each hold their 2 of the 16 reserved places with half-sent requests (and reconnect
    within the header timeout). A prober got 503 on 75 of 76 /health and /metrics calls.
    Here twelve such addresses, half-sent in every way: nothing, part of the request line, the
    whole request line, all but the blank line that ends the headers."""
    app = create_app(CONFIG, env={})
    settings = ConnectionSettings(max_connections=2, header_timeout_seconds=30)
    async with listening(app, "127.0.0.1", 0, settings) as listener:
        connections.extend([await connect(listener.port, f"127.0.0.{n}") for n in (2, 3)])
        await eventually(lambda: listener.book.open == 2)
        halves = [b"", b"GET /hea", b"GET /health HTTP/1.1\r\n",
                  b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n"]
        for n in range(4, 16):
            for half in (halves[n % 4], halves[(n + 1) % 4]):
                sock = await connect(listener.port, f"127.0.0.{n}")
                connections.append(sock)
                sock.send(half)
        await asyncio.sleep(0.2)  # every half has arrived
        for _ in range(3):
            assert await healthy(listener, "127.0.0.20") == 200
            assert (await get(listener, "/metrics", "127.0.0.21"))[0] == 200
        # A half-sent request holds no place (the probes' are given back as their connections
        # close), and waits for the rest of its head no longer than a probe's would take: then
        # the fixed 503, not the 30 s header timeout.
        await eventually(lambda: listener.book.reserved_open == 0)
        await eventually(lambda: refused(app, MAX) == 24)
        assert [await read_all(sock) for sock in connections[2:]] == [REFUSALS[MAX]] * 24


async def test_past_the_bound_on_waiting_connections_the_one_waiting_longest_is_refused(
    connections: list[socket.socket], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flood of half-sent requests cannot keep a probe from waiting its turn: a new
    connection pushes out the one that has waited longest, never itself."""
    monkeypatch.setattr(listener_module, "PROBE_HEAD_SECONDS", 60.0)  # none leaves on time
    app = create_app(CONFIG, env={})
    async with listening(app, "127.0.0.1", 0, ConnectionSettings(max_connections=1)) as listener:
        connections.append(await connect(listener.port, "127.0.0.2"))
        await eventually(lambda: listener.book.open == 1)
        flood = WAITING_CONNECTIONS + 32
        for n in range(flood):
            sock = await connect(listener.port, f"127.0.1.{n % 40 + 1}")
            connections.append(sock)
            sock.send(b"GET /health HTTP/1.1\r\n")
        await eventually(lambda: refused(app, MAX) == 32)
        assert listener.keeper.waiting == WAITING_CONNECTIONS
        assert await read_all(connections[1]) == REFUSALS[MAX]  # the first of the flood
        assert await healthy(listener, "127.0.0.3") == 200
        assert refused(app, MAX) == 33
        await eventually(lambda: listener.book.reserved_open == 0)


MALFORMED = [
    b"GET / HTTP/1.1\r\nHost: x\r\nno colon in this header\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
]


async def test_malformed_requests_are_logged_once_an_interval_with_a_count_not_with_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp logged each malformed request as an ERROR with its traceback: 2,000 of them in
    1.4 s made 1.17 MB of log."""
    app = create_app(CONFIG, env={})
    caplog.set_level(logging.INFO)
    async with listening(app, "127.0.0.1", 0, ConnectionSettings()) as listener:
        for n in range(200):
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
            writer.write(MALFORMED[n % len(MALFORMED)])
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert b" 400 Bad Request\r\n" in answer, answer
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.exc_info]
    # One at once; the other 199 in one line, here when the listener stops.
    assert len(lines) == 2, lines
    assert lines[0].startswith("malformed HTTP request from 127.0.0.1: 400")
    assert lines[1].startswith("malformed HTTP request: 199 more in the last 10 s")
    assert len(caplog.text) < 4000




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
        held = [socket.create_connection(("127.0.0.1", port), source_address=(f"127.0.0.{n}", 0))
                for n in (1, 2)]
        try:
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", port),
                                          source_address=("127.0.0.3", 0)) as refused:
                refused.settimeout(5)
                refused.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
                assert refused.recv(65536).startswith(b"HTTP/1.1 503 ")
            assert http_ok(f"http://127.0.0.1:{port}/health")  # past the cap, but a probe
        finally:
            for sock in held:
                sock.close()
        assert child.stop() == 0, child.tail()
