"""The service's TCP listener: aiohttp's server behind a gate on every connection.

aiohttp takes every connection the kernel hands it, and each costs a socket, buffers and a task
before it has sent a byte. A :class:`Gate` stands before aiohttp's protocol on each one:

* **Limits.** At most ``max_connections`` are open, and at most ``max_connections_per_client``
  from one client address (:mod:`governor.inference.http.connections`), so that one client cannot
  take them all.
* **Probes and the scrape always answered.** Past a limit, a connection is read as far as its
  request head and no further. ``GET /health`` and ``GET /metrics`` without a body are served
  anyway, on one of a few reserved places, one request each; anything else is answered a fixed
  ``503`` (``Retry-After: 1``) and closed as soon as its request line shows it, never parsed,
  never given a task, not counted as a request (it never was one). The path is read rather
  than capacity kept aside because only the path tells a probe from a flood: a reserve handed
  out by arrival would go to whoever fills it, and would shrink the cap for everyone all the
  time. When the service is not full, nothing is read early and nothing is held back.
* **Only a whole probe holds a reserved place.** A reserved place is given once the request's
  head has fully arrived, so it is held only while the service answers: a half-sent request
  holds none, from any number of addresses. Until then the connection waits, at most
  :data:`PROBE_HEAD_SECONDS` (a probe or a scrape sends its head in one write), among at most
  :data:`WAITING_CONNECTIONS`; past that bound the one waiting longest is refused, so a flood
  of half-sent requests cannot keep a probe from waiting its turn either.
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
# The longest request line read from a connection past a limit (aiohttp's own limit), and the
# longest head (request line and headers; a probe's or a scrape's is a few hundred bytes).
_MAX_REQUEST_LINE = 8190
_MAX_PROBE_HEAD = 8190
# How long a connection past a limit has to send its whole request head. Kubelet and Prometheus
# send it in one write as soon as they connect; kubelet's probes give up after 1 s by default.
PROBE_HEAD_SECONDS: Final = 1.0
# Connections past a limit waiting for their request head, at most; one more refuses the one
# waiting longest. As many as the kernel queues for accept: to push out a probe whose head is
# on its way (a round trip on the network), a flood must open more connections in that moment
# than the kernel's queue holds, and the kernel then drops the probe's connection itself.
WAITING_CONNECTIONS: Final = _BACKLOG
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


def head_end(received: bytes | bytearray) -> int:
    """Where the request head in ``received`` ends (after its blank line); -1 until it has.

    >>> head_end(b"GET /health HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"), head_end(b"GET /health\\r\\n")
    (33, -1)
    """
    ends = [at + len(mark) for mark in (b"\r\n\r\n", b"\n\n")
            if (at := received.find(mark)) >= 0]
    return min(ends, default=-1)


def declares_body(head: bytes) -> bool:
    """Whether a request head announces a body (``Content-Length`` above 0, or
    ``Transfer-Encoding``): a probe has none, and a body would keep its place while it comes."""
    for line in head.split(b"\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding" or (name == b"content-length"
                                            and value.strip().lstrip(b"0") != b""):
            return True
    return False


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
        # Connections past a limit awaiting their request head, the longest waiting first.
        self._waiting: dict[Gate, None] = {}
        self.head_seconds = min(PROBE_HEAD_SECONDS, settings.header_timeout_seconds)

    @property
    def waiting(self) -> int:
        """Connections past a limit whose request head has not arrived yet."""
        return len(self._waiting)

    def wait(self, gate: Gate) -> None:
        """Let ``gate`` wait for its request head; the one waiting longest is refused if too
        many do."""
        if len(self._waiting) >= WAITING_CONNECTIONS:
            next(iter(self._waiting)).refuse()
        self._waiting[gate] = None

    def done_waiting(self, gate: Gate) -> None:
        self._waiting.pop(gate, None)

    def __call__(self) -> Gate:
        return Gate(self)

    def refused(self, reason: str, peer: str) -> None:
        self._on_refused(reason)
        self._log.note(f"({reason}) from {peer or 'a local socket'}; {self.book.open} of "
                       f"{self.settings.max_connections} open, {self.book.reserved_open} of "
                       f"{RESERVED_CONNECTIONS} reserved, {self.waiting} waiting", reason)

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
        self._head: bytearray | None = None  # its request head, while read past a limit
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
        else:
            self._head, self._refusal = bytearray(), reason
            self._keeper.wait(self)
            self._deadline = self._keeper.loop.call_later(self._keeper.head_seconds,
                                                          self._headers_late)

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
        elif self._head is not None:
            self._head += data
            self._read_head()

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
        self._keeper.done_waiting(self)
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

    def _read_head(self) -> None:
        """Past a limit: refuse as soon as the request line asks for anything but /health or
        /metrics; give a reserved place once the whole head has arrived."""
        assert self._head is not None
        line = self._head.find(b"\n")
        if line < 0:
            if len(self._head) > _MAX_REQUEST_LINE:
                self.refuse()
            return  # not all of the request line yet
        if not always_answered(bytes(self._head[:line])):
            self.refuse()
            return
        end = head_end(self._head)
        if end < 0:
            if len(self._head) > _MAX_PROBE_HEAD:
                self.refuse()
            return  # not all of the head yet
        book = self._keeper.book
        if declares_body(bytes(self._head[:end])) or not book.may_reserve(self._peer):
            self.refuse()
            return
        received, self._head = bytes(self._head), None
        self._keeper.done_waiting(self)
        self._stop_waiting()
        self._place = book.take(self._peer, reserved=True)
        self._serve()
        assert self._inner is not None
        self._inner.data_received(received)

    def _await_headers(self) -> None:
        self._deadline = self._keeper.loop.call_later(
            self._keeper.settings.header_timeout_seconds, self._headers_late)

    def _stop_waiting(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._head is not None:  # past a limit, and no whole head in time
            self.refuse()
        elif self._transport is not None and not self._busy:
            self._keeper.refused(REASON_HEADER_TIMEOUT, self._peer)
            self._transport.close()

    def refuse(self) -> None:
        """Past a limit: the fixed 503 for why it had no regular place, then close."""
        assert self._transport is not None
        self._head = None
        self._keeper.done_waiting(self)
        self._stop_waiting()
        self._keeper.refused(self._refusal, self._peer)
        self._transport.write(REFUSALS[self._refusal])
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
    places and the connections waiting for one), as far as the hard limit allows: past it,
    accept() would fail (and asyncio stop accepting for a second) before the cap is reached."""
    import resource

    wanted = max_connections + RESERVED_CONNECTIONS + WAITING_CONNECTIONS + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < wanted:
            log.warning("only %d open files allowed (hard limit): fewer than --max-connections "
                        "%d needs; accepting may fail before the cap", raised, max_connections)
