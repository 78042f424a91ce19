"""The service's TCP listener: aiohttp's server behind a gate on every connection.

aiohttp takes every connection the kernel hands it, and each costs a socket, buffers and a task
before it has sent a byte. A :class:`Gate` stands before aiohttp's protocol on each one:

* **Limits.** At most ``max_connections`` are open, and at most ``max_connections_per_client``
  from one client address (:mod:`governor.inference.http.connections`), so that one client cannot
  take them all.
* **Probes and the scrape always answered.** Past a limit, a connection is read as far as its
  request line and no further. ``GET /health`` and ``GET /metrics`` are served anyway, on one of
  a few reserved places, one request each; anything else is answered a fixed ``503``
  (``Retry-After: 1``) and closed, never parsed, never given a task, not counted as a request
  (it never was one). The path is read rather than capacity kept aside because only the path
  tells a probe from a flood: a reserve handed out by arrival would go to whoever fills it, and
  would shrink the cap for everyone all the time. When the service is not full, nothing is read
  early and nothing is held back.
* **Headers on time.** A request's headers must arrive within ``header_timeout_seconds`` of its
  first byte (of the connection, for its first request), else the connection is closed; a
  body keeps its own pace (:mod:`governor.inference.http.body`). So neither a trickling client nor
  one that reconnects holds a place for long.

Refusals and closings are counted in ``governor_connections_refused_total{reason}`` and logged
at most once per 10 s. The refusal is best effort: a client still sending may see the connection
reset instead. Idle connections close after the keep-alive timeout::

    async with listening(app, "127.0.0.1", 8000, ConnectionSettings()) as listener:
        listener.port           # the bound port (for port 0)
        await stopped()         # SIGINT or SIGTERM
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from governor.contracts.endpoints import HEALTH_PATH, METRICS_PATH
from governor.contracts.metrics.service import (
    REASON_HEADER_TIMEOUT,
    REASON_MAX_CONNECTIONS,
    REASON_MAX_CONNECTIONS_PER_CLIENT,
)
from governor.inference import keys
from governor.inference.config import ConnectionSettings
from governor.inference.http.connections import RESERVED_CONNECTIONS, ConnectionBook, Place
from governor.inference.http.errors import UNAVAILABLE, error_body
from governor.inference.http.serverlog import RateLimitedLog, ServerLog

log = logging.getLogger(__name__)

# Connections the kernel queues before the service accepts them (web.run_app's default).
_BACKLOG = 128
# Descriptors beside the connections: the engine, logs, the text threads' files.
_SPARE_FILES = 256
# The longest request line read from a connection past a limit (aiohttp's own limit).
_MAX_REQUEST_LINE = 8190
# What a connection past a limit may still ask for, as its request line names it.
_ALWAYS_ANSWERED: Final = frozenset(path.encode() for path in (HEALTH_PATH, METRICS_PATH))


def _refusal(message: str, code: str) -> bytes:
    body = json.dumps(error_body(message, UNAVAILABLE, code=code)).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Retry-After: 1\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


# The fixed answers past each limit.
REFUSALS: Final = {
    REASON_MAX_CONNECTIONS: _refusal(
        "the server has too many open connections; retry later", "too_many_connections"),
    REASON_MAX_CONNECTIONS_PER_CLIENT: _refusal(
        "this client address has too many open connections; close some or retry later",
        "too_many_connections_from_client"),
}


def always_answered(request_line: bytes) -> bool:
    """Whether a request line is ``GET /health`` or ``GET /metrics`` (a query string allowed)."""
    parts = request_line.rstrip(b"\r").split(b" ")
    return (len(parts) == 3 and parts[0] == b"GET"
            and parts[1].split(b"?", 1)[0] in _ALWAYS_ANSWERED)


class Gatekeeper:
    """A protocol factory for ``loop.create_server``: a :class:`Gate` per connection, and what
    the gates share (the book of places, the limits, the refusal counter and log)."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], settings: ConnectionSettings,
                 on_refused: Callable[[str], None], loop: asyncio.AbstractEventLoop) -> None:
        self.factory = factory
        self.settings = settings
        self.book = ConnectionBook(settings.max_connections, settings.per_client_limit)
        self.loop = loop
        self._on_refused = on_refused
        self._log = RateLimitedLog(log, "connection refused", loop=loop)

    def __call__(self) -> Gate:
        return Gate(self)

    def refused(self, reason: str, peer: str) -> None:
        self._on_refused(reason)
        self._log.note(f"({reason}) from {peer or 'a local socket'}; {self.book.open} of "
                       f"{self.settings.max_connections} open, {self.book.reserved_open} of "
                       f"{RESERVED_CONNECTIONS} reserved", reason)

    def close(self) -> None:
        self._log.flush()


class Gate(asyncio.Protocol):
    """One connection: aiohttp's protocol behind the limits and the header timeout. The app's
    middleware tells it when a request starts and ends (:func:`serving`)."""

    def __init__(self, keeper: Gatekeeper) -> None:
        self._keeper = keeper
        self._transport: asyncio.Transport | None = None
        self._peer = ""
        self._place: Place | None = None
        self._inner: asyncio.Protocol | None = None  # aiohttp's, once it is served
        self._line: bytearray | None = None  # its request line, while read past a limit
        self._refusal = ""  # why it had no regular place
        self._deadline: asyncio.TimerHandle | None = None  # for the headers awaited
        self._busy = False  # a request's headers are in, and it is being served
        # When the first byte of the request being read or served arrived (perf_counter).
        self.first_byte_at: float | None = None

    @property
    def reserved(self) -> bool:
        """Served past a limit: for one request, /health or /metrics."""
        return self._place is not None and self._place.reserved

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport, self._peer = transport, _peer(transport)
        book = self._keeper.book
        reason = book.refusal(self._peer)
        if reason is None:
            self._place = book.take(self._peer)
            self._serve()
        elif book.may_reserve(self._peer):
            self._place = book.take(self._peer, reserved=True)
            self._line, self._refusal = bytearray(), reason
            self._await_headers()
        else:
            self._refuse(reason)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            if not self._busy and self.first_byte_at is None:
                self.first_byte_at = time.perf_counter()
            if not self._busy and self._deadline is None:
                # The first byte of the next request. (Or the rest of a body that the last
                # answer did not read, which aiohttp drains: a connection then left idle is
                # closed at the header timeout rather than the keep-alive timeout.)
                self._await_headers()
            self._inner.data_received(data)
        elif self._line is not None:
            self._line += data
            self._read_request_line()

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        if self._place is not None:
            self._keeper.book.give_back(self._place)
            self._place = None
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def request_started(self) -> None:
        self._busy = True
        self._stop_waiting()

    def request_ended(self) -> None:
        self._busy = False
        self.first_byte_at = None

    def _serve(self) -> None:
        assert self._transport is not None
        self._inner = self._keeper.factory()
        self._inner.connection_made(self._transport)
        if self._deadline is None:
            self._await_headers()

    def _read_request_line(self) -> None:
        assert self._line is not None
        end = self._line.find(b"\n")
        if end < 0 and len(self._line) <= _MAX_REQUEST_LINE:
            return  # not all of it yet
        if end >= 0 and always_answered(bytes(self._line[:end])):
            received, self._line = bytes(self._line), None
            self._serve()
            assert self._inner is not None
            self._inner.data_received(received)
        else:
            self._refuse(self._refusal)

    def _await_headers(self) -> None:
        self._deadline = self._keeper.loop.call_later(
            self._keeper.settings.header_timeout_seconds, self._headers_late)

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._line is not None:  # past a limit, and no request line in time
            self._refuse(self._refusal)
        elif self._transport is not None and not self._busy:
            self._keeper.refused(REASON_HEADER_TIMEOUT, self._peer)
            self._transport.close()

    def _refuse(self, reason: str) -> None:
        assert self._transport is not None
        self._line = None
        self._keeper.refused(reason, self._peer)
        self._transport.write(REFUSALS[reason])
        self._transport.close()


def _peer(transport: asyncio.BaseTransport) -> str:
    """The client's address (its host, not its port); empty for a Unix socket."""
    name = transport.get_extra_info("peername")
    return str(name[0]) if isinstance(name, tuple) and name else ""


@contextlib.contextmanager
def serving(request: web.Request) -> Iterator[bool]:
    """Around one request, in the app's middleware: its connection's header timer stops while it
    is served. Yields whether it is its connection's only request (a reserved place's): its
    response then closes the connection. Under a server without the gate (a test server), a
    no-op that yields ``False``."""
    transport = request.transport
    gate = transport.get_protocol() if transport is not None else None
    if not isinstance(gate, Gate):
        yield False
        return
    gate.request_started()
    try:
        yield gate.reserved
    finally:
        gate.request_ended()


def first_byte_at(request: web.Request) -> float | None:
    """When the first byte of ``request`` arrived (``time.perf_counter``), as its connection's
    gate saw it; ``None`` when unknown: no gate (a test server), a request served past a limit,
    or one whose bytes came while the one before it was still served (pipelining)."""
    transport = request.transport
    gate = transport.get_protocol() if transport is not None else None
    return gate.first_byte_at if isinstance(gate, Gate) else None


@dataclass(frozen=True)
class Listener:
    server: asyncio.Server
    keeper: Gatekeeper

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    @property
    def book(self) -> ConnectionBook:
        return self.keeper.book


@contextlib.asynccontextmanager
async def listening(
    app: web.Application, host: str, port: int, settings: ConnectionSettings,
    *, sock: socket.socket | None = None,
) -> AsyncIterator[Listener]:
    """Serve ``app`` on ``host:port`` (or the bound ``sock``) until the block ends; then stop
    accepting, finish or cut the open requests, and run the app's cleanup."""
    loop = asyncio.get_running_loop()
    malformed = RateLimitedLog(log, "malformed HTTP request", loop=loop)
    # What a client still sends after an answer that did not read its body (a 408, a 413, a
    # 401) is read and dropped for as long as a body may wait, then the connection closes.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           keepalive_timeout=settings.keepalive_timeout_seconds,
                           lingering_time=settings.body_timeout_seconds,
                           logger=ServerLog(logging.getLogger("aiohttp.server"), malformed))
    await runner.setup()
    keeper: Gatekeeper | None = None
    try:
        assert runner.server is not None  # set up
        refused = app[keys.METRICS].connections_refused
        keeper = Gatekeeper(runner.server, settings, lambda r: refused.labels(r).inc(), loop)
        if sock is None:
            server = await loop.create_server(keeper, host, port, reuse_address=True,
                                              backlog=_BACKLOG)
        else:
            server = await loop.create_server(keeper, sock=sock, backlog=_BACKLOG)
        try:
            yield Listener(server, keeper)
        finally:
            server.close()
    finally:
        await runner.cleanup()
        malformed.flush()
        if keeper is not None:
            keeper.close()


async def stopped() -> None:
    """Return on SIGINT or SIGTERM (``governor serve``'s way out, as ``web.run_app``'s)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def allow_open_files(max_connections: int) -> None:
    """Raise the soft limit on open files to what ``max_connections`` needs (and the reserved
    places), as far as the hard limit allows: past it, accept() would fail (and asyncio stop
    accepting for a second) before the cap is reached."""
    import resource

    wanted = max_connections + RESERVED_CONNECTIONS + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < wanted:
            log.warning("only %d open files allowed (hard limit): fewer than --max-connections "
                        "%d needs; accepting may fail before the cap", raised, max_connections)
