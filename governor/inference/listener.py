"""The service's TCP listener: aiohttp's server behind a cap on open connections.

aiohttp takes every connection the kernel hands it, and each costs a socket, buffers and a
task before it has sent a byte. Past ``max_connections`` open ones, a new connection is answered
at once with a fixed ``503`` (``Retry-After: 1``) and closed: it is never parsed, gets no task,
and is not counted as a request (it never was one). The answer is best effort: a client that is
still sending may see the connection reset instead. Idle connections, and connections that never
send a request, close after the keep-alive timeout, so idle clients cannot hold the cap for
long::

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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

from governor.inference.config import ConnectionSettings
from governor.inference.errors import UNAVAILABLE, error_body

log = logging.getLogger(__name__)

# Connections the kernel queues before the service accepts them (web.run_app's default).
_BACKLOG = 128
# Descriptors beside the connections: the engine, logs, the text threads' files.
_SPARE_FILES = 256
# At most one warning this often while connections are being refused.
_WARN_EVERY_SECONDS = 10.0
_REFUSAL_BODY = json.dumps(error_body(
    "the server has too many open connections; retry later", UNAVAILABLE,
    code="too_many_connections")).encode()
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n"
    + f"Content-Length: {len(_REFUSAL_BODY)}\r\n\r\n".encode() + _REFUSAL_BODY
)


class ConnectionCap:
    """A protocol factory for ``loop.create_server``: aiohttp's, for the first ``limit`` open
    connections; beyond them, one that refuses."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], limit: int) -> None:
        self._factory = factory
        self._limit = limit
        self.open = 0
        self.refused = 0
        self._warned_at = -_WARN_EVERY_SECONDS
        self._refused_since_warning = 0

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self._limit:
            self._note_refusal()
            return _Refused()
        self.open += 1
        return _Counted(self._factory(), self._closed)

    def _closed(self) -> None:
        self.open -= 1

    def _note_refusal(self) -> None:
        self.refused += 1
        self._refused_since_warning += 1
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_SECONDS:
            log.warning("%d connections refused: %d are open, the limit "
                        "(--max-connections)", self._refused_since_warning, self.open)
            self._warned_at, self._refused_since_warning = now, 0


class _Counted(asyncio.Protocol):
    """aiohttp's protocol, unchanged, with its end counted (the transport sees only this)."""

    def __init__(self, inner: asyncio.Protocol, on_close: Callable[[], None]) -> None:
        self._inner = inner
        self._on_close: Callable[[], None] | None = on_close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None
        self._inner.connection_lost(exc)


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(REFUSAL)
        transport.close()


@dataclass(frozen=True)
class Listener:
    server: asyncio.Server
    cap: ConnectionCap

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])


@contextlib.asynccontextmanager
async def listening(
    app: web.Application, host: str, port: int, settings: ConnectionSettings,
    *, sock: socket.socket | None = None,
) -> AsyncIterator[Listener]:
    """Serve ``app`` on ``host:port`` (or the bound ``sock``) until the block ends; then stop
    accepting, finish or cut the open requests, and run the app's cleanup."""
    # What a client still sends after an answer that did not read its body (a 408, a 413, a
    # 401) is read and dropped for as long as a body may wait, then the connection closes.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           keepalive_timeout=settings.keepalive_timeout_seconds,
                           lingering_time=settings.body_timeout_seconds)
    await runner.setup()
    try:
        assert runner.server is not None  # set up
        cap = ConnectionCap(runner.server, settings.max_connections)
        loop = asyncio.get_running_loop()
        if sock is None:
            server = await loop.create_server(cap, host, port, reuse_address=True,
                                              backlog=_BACKLOG)
        else:
            server = await loop.create_server(cap, sock=sock, backlog=_BACKLOG)
        try:
            yield Listener(server, cap)
        finally:
            server.close()
    finally:
        await runner.cleanup()


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
    """Raise the soft limit on open files to what ``max_connections`` needs, as far as the hard
    limit allows: past it, accept() would fail (and asyncio stop accepting for a second) before
    the cap is reached."""
    import resource

    wanted = max_connections + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < wanted:
            log.warning("only %d open files allowed (hard limit): fewer than --max-connections "
                        "%d needs; accepting may fail before the cap", raised, max_connections)
