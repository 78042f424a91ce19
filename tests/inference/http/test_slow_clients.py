"""Clients that stop reading, or send too slowly, cannot hold the service's slots or connections.

A stalled stream releases its engine slot within the write timeout (counted 408, the client's
fault, and its engine request aborted); a request still unfinished at its deadline ends (408 if
its body never arrived, else 504); a response nobody reads does not keep its connection.
Stalled clients are raw sockets with a small receive buffer that send a request and never read.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, get_port_socket

from governor.common.process import wait_http_ok
from governor.contracts.metrics import service as svc
from governor.inference import keys
from governor.inference.app import create_app
from governor.inference.config import AdmissionSettings, ConnectionSettings, ServiceConfig
from governor.inference.engines.base import Engine
from governor.inference.engines.settings import EngineSettings
from governor.inference.http.body import body_allowance_seconds
from governor.inference.textwork import SMALL_BODY_BYTES
from governor.inference.warmup import WarmupSettings
from tests.inference.conftest import Service, ServiceFactory
from tests.support.scripted import Script, ScriptedEngine

MakeScripted = Callable[..., Awaitable[Service]]
CHAT_PATH = "/v1/chat/completions"
WRITE_TIMEOUT_SECONDS = 1.5
MIB = 1024 * 1024
# Steps cost nothing: a stalled stream fills the socket buffers within a fraction of a second.
FAST_SIM = EngineSettings(kind="sim", preset="tiny", seed=5, time_scale=0.0)


def requests_counted(service: Service, code: str, request_class: str = svc.DEFAULT_CLASS
                     ) -> float:
    return service.sample(svc.REQUESTS.total, {"route": CHAT_PATH, "code": code,
                                               "class": request_class}) or 0.0


def server_errors(service: Service) -> float:
    return sum(sample.value for family in service.registry.collect()
               for sample in family.samples
               if sample.name == svc.REQUESTS.total and sample.labels["code"][0] == "5")


def http_request(path: str, body: bytes, *, method: str = "POST") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def stalled_client(port: int, request: bytes) -> socket.socket:
    """A connection that sends ``request`` and never reads: its receive buffer is small, so
    the server's writes soon wait for it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, request)
    return sock


def small_send_buffer(host: str, port: int, family: socket.AddressFamily) -> socket.socket:
    """The listening socket, with a send buffer its connections inherit: on loopback (64 KiB
    segments) the kernel would otherwise let a connection buffer megabytes, and a stalled
    stream would finish before its writes ever waited."""
    sock = get_port_socket(host, port, family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    return sock


@pytest.fixture
async def make_small_buffered() -> AsyncIterator[Callable[..., Awaitable[Service]]]:
    """Services whose connections buffer little, so that writes wait for stalled readers."""
    servers: list[TestServer] = []

    async def make(config: ServiceConfig, *, engine: Engine | None = None) -> Service:
        # No warm-up: /health's 503s while it ran would count as server errors here.
        config = replace(config, warmup=WarmupSettings(0))
        app = (create_app(config, env={}) if engine is None else
               create_app(config, engine_factory=lambda _c, _r: engine, env={}))
        server = TestServer(app, socket_factory=small_send_buffer)
        await server.start_server()
        servers.append(server)
        service = Service(server)
        await wait_http_ok(f"{service.url}/health", limit_seconds=30, poll_seconds=0.05)
        return service

    yield make
    for server in servers:
        await server.close()


@pytest.fixture
async def sockets() -> AsyncIterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def port_of(service: Service) -> int:
    port = service.server.port
    assert port is not None
    return port


async def wait_until(condition: Callable[[], bool], limit_seconds: float) -> None:
    deadline = time.monotonic() + limit_seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def received_until_closed(sock: socket.socket) -> int:
    """Read until the server closes or resets the connection; the bytes read."""
    loop = asyncio.get_running_loop()
    received = 0
    try:
        while chunk := await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 5):
            received += len(chunk)
    except ConnectionResetError:
        pass
    return received


async def served_with_retries(service: Service, body: dict[str, object]) -> tuple[int, str]:
    """A well-behaved client: retries a 429 after a short pause; its refusals and its text."""
    refusals = 0
    async with aiohttp.ClientSession() as session, asyncio.timeout(30):
        while True:
            async with session.post(service.url + CHAT_PATH, json=body) as response:
                text = await response.text()
                if response.status != 429:
                    assert response.status == 200, text
                    return refusals, text
            refusals += 1
            await asyncio.sleep(0.05)


async def test_600_stalled_streams_keep_a_good_client_out_no_longer_than_the_write_timeout(
    make_small_buffered: Callable[..., Awaitable[Service]], sockets: list[socket.socket],
) -> None:
    service = await make_small_buffered(ServiceConfig(
        engine=FAST_SIM, admission=AdmissionSettings(max_in_flight=4, max_queue=0),
        connections=ConnectionSettings(write_timeout_seconds=WRITE_TIMEOUT_SECONDS)))
    stall = json.dumps({"model": "tiny", "stream": True, "max_tokens": 1900, "ignore_eos": True,
                        "messages": [{"role": "user", "content": "a long answer"}]}).encode()
    request = http_request(CHAT_PATH, stall)
    sockets.extend(await asyncio.gather(*(stalled_client(port_of(service), request)
                                          for _ in range(600))))
    # Stalled streams take every slot; the others are refused (429), but for a few that reach
    # the queue just as a stalled stream has been dropped (a slow machine takes that long to
    # refuse hundreds), and stall in turn.
    def stalled_answered() -> float:
        in_flight = service.sample(svc.REQUESTS_IN_FLIGHT.name) or 0.0
        return requests_counted(service, "429") + requests_counted(service, "408") + in_flight

    await wait_until(lambda: stalled_answered() == 600, 60)
    assert requests_counted(service, "429") >= 500

    started = time.monotonic()
    good = {"model": "tiny", "stream": True, "max_tokens": 8,
            "messages": [{"role": "user", "content": "hello there"}]}
    refusals, text = await served_with_retries(service, good)
    waited = time.monotonic() - started
    assert text.endswith("data: [DONE]\n\n")
    # At worst the stalled streams still held every slot when it came: they fill their buffers
    # within a fraction of a second, then wait out the write timeout. (On a loaded machine,
    # refusing the 596 may take longer than that, and it walks straight in.) The rest of the
    # margin is for two slow, shared cores; without the write timeout it would wait forever.
    assert waited < WRITE_TIMEOUT_SECONDS + 2.5, waited

    # Every stalled stream that got a slot was dropped: the client's fault, not a 5xx.
    await wait_until(lambda: service.sample(svc.REQUESTS_IN_FLIGHT.name) == 0.0, 30)
    assert requests_counted(service, "408") + requests_counted(service, "429") == 600 + refusals
    assert requests_counted(service, "408") >= 4
    assert server_errors(service) == 0


async def test_a_stalled_streams_engine_request_is_aborted_at_the_write_timeout(
    make_small_buffered: Callable[..., Awaitable[Service]], sockets: list[socket.socket],
) -> None:
    engine = ScriptedEngine(Script(token_delay_seconds=0.001))
    engine.max_model_len = 8192  # room for a stream far longer than the buffers
    service = await make_small_buffered(ServiceConfig(connections=ConnectionSettings(
        write_timeout_seconds=WRITE_TIMEOUT_SECONDS)), engine=engine)
    stall = json.dumps({"model": "scripted", "stream": True, "max_tokens": 8000,
                        "messages": [{"role": "user", "content": "a b c"}]}).encode()
    started = time.monotonic()
    sockets.append(await stalled_client(port_of(service), http_request(CHAT_PATH, stall)))
    await wait_until(lambda: requests_counted(service, "408") == 1, 30)
    # Eight thousand tokens take eight seconds or more; the stream ended long before.
    assert time.monotonic() - started < 6.0
    assert len(engine.aborted) == 1
    assert engine.running == 0


async def test_a_body_that_does_not_arrive_by_the_deadline_is_a_408(
    make_service: ServiceFactory, sockets: list[socket.socket],
) -> None:
    service = await make_service(connections=ConnectionSettings(request_timeout_seconds=0.5))
    partial = http_request(CHAT_PATH, b"{" + b" " * 99)[:-60]  # 40 of 100 bytes of body
    sock = await stalled_client(port_of(service), partial)
    sockets.append(sock)
    answer = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), 5)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"request_timeout"' in answer
    assert requests_counted(service, "408", svc.UNCLASSIFIED) == 1  # refused before classified


async def test_a_stalled_small_body_is_a_408_at_the_body_timeout_not_the_deadline(
    make_service: ServiceFactory, sockets: list[socket.socket],
) -> None:
    """Headers that declare 100 bytes, then ``{"model":`` and nothing more: the request used to
    hold its connection until its deadline (600 s); now its body must keep the pace large
    bodies keep, from the body timeout on."""
    service = await make_service(connections=ConnectionSettings(body_timeout_seconds=0.5))
    stalled = http_request(CHAT_PATH, b'{"model":' + b" " * 91)[:-91]
    started = time.monotonic()
    sock = await stalled_client(port_of(service), stalled)
    sockets.append(sock)
    answer = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), 5)
    assert 0.4 < time.monotonic() - started < 1.5
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"request_timeout"' in answer and b"--body-timeout" in answer
    assert requests_counted(service, "408", svc.UNCLASSIFIED) == 1


async def test_large_bodies_take_turns_and_a_trickling_one_cannot_keep_its_turn(
    make_service: ServiceFactory, sockets: list[socket.socket],
) -> None:
    """One text thread: one large body read at a time. A client that announces 1 MiB and
    sends nothing holds the turn only as long as 1 MiB takes at 1 MiB/s (plus a second)."""
    service = await make_service(tokenizer_threads=1)
    announced = http_request(CHAT_PATH, b" " * MIB)[: -MIB]  # the headers, no body
    sockets.append(await stalled_client(port_of(service), announced))
    await asyncio.sleep(0.2)  # it holds the turn
    config = service.app[keys.CONFIG]
    allowance = body_allowance_seconds(MIB, config.max_body_bytes,
                                       config.connections.body_timeout_seconds)

    async def timed(body: dict[str, object]) -> tuple[int, float]:
        started = time.monotonic()
        async with aiohttp.ClientSession() as session, session.post(
            service.url + CHAT_PATH, json=body
        ) as response:
            await response.read()
            return response.status, time.monotonic() - started

    small = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    large = {"model": "tiny", "max_tokens": 2,
             "messages": [{"role": "user", "content": "x" * (2 * SMALL_BODY_BYTES)}]}
    (small_status, small_seconds), (large_status, large_seconds) = await asyncio.gather(
        timed(small), timed(large))
    assert small_status == 200 and small_seconds < 1.0  # small bodies take no turn
    assert large_status == 400  # prepared in its turn: 128 KiB of "x" are too many tokens
    assert allowance - 0.5 < large_seconds < allowance + 2.0  # it waited for the turn
    assert requests_counted(service, "408", svc.UNCLASSIFIED) == 1


async def test_a_declared_length_over_the_limit_is_a_413_at_once_and_takes_no_turn(
    make_service: ServiceFactory, sockets: list[socket.socket],
) -> None:
    """One text thread. A client announces one byte more than --max-body-bytes and sends
    nothing: it is answered 413 before its body is read, and a large request sent right after
    it does not wait for a turn it would have held (5 s for 4 MiB)."""
    service = await make_service(tokenizer_threads=1)
    limit = service.app[keys.CONFIG].max_body_bytes
    announced = (f"POST {CHAT_PATH} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json"
                 f"\r\nContent-Length: {limit + 1}\r\n\r\n").encode()
    started = time.monotonic()
    sock = await stalled_client(port_of(service), announced)
    sockets.append(sock)
    large = {"model": "tiny", "max_tokens": 2,
             "messages": [{"role": "user", "content": "x" * (2 * SMALL_BODY_BYTES)}]}
    async with aiohttp.ClientSession() as session, session.post(
        service.url + CHAT_PATH, json=large
    ) as response:
        await response.read()
    assert response.status == 400  # prepared at once: too many tokens
    answer = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), 5)
    assert time.monotonic() - started < 1.5
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == "request_too_large"
    assert str(limit) in error["message"]
    assert requests_counted(service, "413", svc.UNCLASSIFIED) == 1


async def test_a_client_with_many_large_bodies_waiting_cannot_keep_another_out(
    make_service: ServiceFactory, sockets: list[socket.socket],
) -> None:
    """One text thread. A client (127.0.0.1) announces four 1 MiB bodies and sends none: each
    holds the turn for its allowance. Another client's large request (from 127.0.0.2) waits for
    the one holding the turn, not for all four: turns go round the clients."""
    service = await make_service(tokenizer_threads=1)
    announced = http_request(CHAT_PATH, b" " * MIB)[: -MIB]  # the headers, no body
    for _ in range(4):
        sockets.append(await stalled_client(port_of(service), announced))
        await asyncio.sleep(0.05)  # in this order
    config = service.app[keys.CONFIG]
    allowance = body_allowance_seconds(MIB, config.max_body_bytes,
                                       config.connections.body_timeout_seconds)
    large = {"model": "tiny", "max_tokens": 2,
             "messages": [{"role": "user", "content": "x" * (2 * SMALL_BODY_BYTES)}]}
    started = time.monotonic()
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=connector) as session, session.post(
        service.url + CHAT_PATH, json=large
    ) as response:
        await response.read()
    waited = time.monotonic() - started
    assert response.status == 400  # prepared in its turn: too many tokens
    assert waited < allowance + 1.5, f"waited {waited:.1f} s behind the other client's queue"
    await wait_until(lambda: requests_counted(service, "408", svc.UNCLASSIFIED) == 4,
                     4 * allowance + 5)


async def test_a_stream_still_running_at_its_deadline_ends_with_an_error_event(
    scripted: MakeScripted,
) -> None:
    service = await scripted(Script(token_delay_seconds=0.05),
                             connections=ConnectionSettings(request_timeout_seconds=0.5))
    body = {"model": "scripted", "stream": True, "max_tokens": 40,
            "messages": [{"role": "user", "content": "a b c"}]}
    async with aiohttp.ClientSession() as session, session.post(
        service.url + CHAT_PATH, json=body
    ) as response:
        assert response.status == 200
        text = await response.text()
    events = [event[6:] for event in text.split("\n\n") if event.startswith("data: ")]
    assert json.loads(events[-2])["error"]["code"] == "deadline_exceeded"
    assert events[-1] == "[DONE]"
    assert 2 < len(events) < 40
    # The service did not finish in time: a server error, as it would be before the first token.
    assert requests_counted(service, "504") == 1
    engine = service.engine
    assert isinstance(engine, ScriptedEngine)
    assert len(engine.aborted) == 1  # the engine request was aborted


async def test_a_whole_response_not_ready_by_the_deadline_is_a_504(
    scripted: MakeScripted,
) -> None:
    service = await scripted(Script(token_delay_seconds=0.05),
                             connections=ConnectionSettings(request_timeout_seconds=0.5))
    body = {"model": "scripted", "max_tokens": 40,
            "messages": [{"role": "user", "content": "a b c"}]}
    async with aiohttp.ClientSession() as session, session.post(
        service.url + CHAT_PATH, json=body
    ) as response:
        assert response.status == 504
        assert (await response.json())["error"]["code"] == "deadline_exceeded"


async def test_a_response_nobody_reads_does_not_keep_its_connection(
    aiohttp_server: Callable[..., Awaitable[TestServer]], sockets: list[socket.socket],
) -> None:
    """/metrics, or a long completion: the handler is done, the client never reads the body."""
    config = replace(ServiceConfig(engine=FAST_SIM),
                     connections=ConnectionSettings(write_timeout_seconds=0.5))
    app = create_app(config, env={})

    async def big(_request: web.Request) -> web.Response:
        return web.Response(body=b"x" * (8 * 1024 * 1024))

    app.router.add_get("/big", big)
    server = await aiohttp_server(app)
    assert server.port is not None
    sock = await stalled_client(server.port, http_request("/big", b"", method="GET"))
    sockets.append(sock)
    await asyncio.sleep(1.5)  # the write timeout passes while nothing is read
    # What the server had buffered, then the end of a connection it dropped half-way.
    assert await received_until_closed(sock) < 8 * 1024 * 1024
    counted = app[keys.REGISTRY].get_sample_value(
        svc.REQUESTS.total, {"route": "/big", "code": "408", "class": svc.UNCLASSIFIED})
    assert counted == 1.0
