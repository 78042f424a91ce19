"""Writing to a client that must keep reading: a write left blocked too long ends the request.

A client that sends a streaming request and stops reading leaves the service's writes waiting
once the socket buffers between them are full; without a limit, its request would hold an
engine slot (and its KV blocks) for as long as the connection lives. :class:`ClientWriter`
bounds each wait by the write timeout and raises :class:`ClientTooSlow` past it; the caller
aborts the engine request, releases the slot and drops the connection. That is the client's
fault, and it is counted as ``408``, not as a server error::

    writer = ClientWriter(request, web.StreamResponse(), timeout_seconds=30)
    await writer.prepare()
    await writer.write(b"data: ...\\n\\n")   # ClientTooSlow if it waits 30 s for the client
    await writer.write_eof()

A write only waits when the transport holds more than its high-water mark, which a reader that
keeps up never lets happen; the timer is armed only then, so streaming to a healthy client costs
no timer per token (a paced stream, below, arms it at each write: a few microseconds).

A stream may also be *paced* by its reader (``send_buffer_bytes``): the socket's send buffer is
capped, and a write that leaves anything in the transport waits until the kernel has taken it.
The service then holds a slow reader's tokens itself instead of queueing hundreds of kilobytes
of them in the kernel, so its inter-token clock ticks when the client can take the next token,
not when the engine made it: a slow reader shows in the service's own inter-token histogram and
``stream_write`` stage (the verdict's ``client_stream``). A reader that keeps up never fills
the buffer, and its writes never wait. The cap limits one stream to about
``2 * send_buffer_bytes`` per round trip (Linux doubles the value it is given): 16 KiB is
320 KB/s at 100 ms, far above a token stream's few tens of KB/s.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable

from aiohttp import web

log = logging.getLogger(__name__)


class ClientTooSlow(Exception):
    """A write waited longer than the write timeout for the client to read."""


class ClientWriter:
    """Writes one response; every wait for the client is bounded by ``timeout_seconds``."""

    __slots__ = (
        "_request",
        "_restore",
        "_send_buffer_bytes",
        "_timeout_seconds",
        "response",
        "waiting",
    )

    def __init__(
        self, request: web.Request, response: web.StreamResponse, timeout_seconds: float,
        send_buffer_bytes: int = 0,
    ) -> None:
        self._request = request
        self._timeout_seconds = timeout_seconds
        self._send_buffer_bytes = send_buffer_bytes  # 0: not paced by its reader
        # The connection's settings before pacing, put back when the response ends (a
        # keep-alive connection's next response is not paced): (send buffer, buffer limits).
        self._restore: tuple[int, tuple[int, int]] | None = None
        self.response = response
        # True while a write waits for the client, and left True when that wait is cancelled
        # (the request's deadline): who was waiting on whom when time ran out.
        self.waiting = False

    async def prepare(self) -> None:
        """Send the status line and headers (and pace the rest by the reader, if asked)."""
        await self._bounded(self.response.prepare(self._request))
        if self._send_buffer_bytes:
            self._pace()

    async def write(self, data: bytes) -> None:
        # Paced, any write may find the kernel's buffer full (and aiohttp then waits inside it).
        if self._restore is not None or self._may_wait(len(data)):
            await self._bounded(self.response.write(data))
        else:
            await self.response.write(data)
        if self._restore is not None and self._request.protocol.writing_paused:
            # Paced: the kernel did not take all of it; wait until it has. aiohttp's own writer
            # waits the same way, but only once per 64 KiB written; its protocol's wait is
            # private (aiohttp 3.x), and tests/inference/http/test_paced_stream.py fails if it
            # stops pacing.
            await self._bounded(self._request.protocol._drain_helper())

    async def write_eof(self) -> None:
        try:
            await self._bounded(self.response.write_eof())
        finally:
            self.unpace()

    def _pace(self) -> None:
        transport = self._request.transport
        sock = None if transport is None else transport.get_extra_info("socket")
        if transport is None or sock is None:
            return
        try:
            before = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_bytes)
        except OSError as exc:  # not a socket that takes it: the stream is not paced
            log.debug("stream not paced: %s", exc)
            return
        self._restore = (before, transport.get_write_buffer_limits())
        # Paused as soon as the transport holds a byte the kernel did not take.
        transport.set_write_buffer_limits(high=0, low=0)

    def unpace(self) -> None:
        """Give the connection back its send buffer and limits (idempotent)."""
        restore, self._restore = self._restore, None
        transport = self._request.transport
        if restore is None or transport is None or transport.is_closing():
            return
        send_buffer, (low, high) = restore
        # The size it had; Linux no longer auto-tunes a buffer once it was set, so a keep-alive
        # connection keeps that size for the rest of its life.
        sock = transport.get_extra_info("socket")
        try:
            if sock is not None:  # Linux reports twice what it was given
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, max(send_buffer // 2, 1))
        except OSError as exc:
            log.debug("send buffer not restored: %s", exc)
        transport.set_write_buffer_limits(high=high, low=low)

    async def send(self) -> None:
        """Send a whole response that the handler built but did not send (its body)."""
        await self._bounded(self._send_whole())

    async def _send_whole(self) -> None:
        await self.response.prepare(self._request)
        await self.response.write_eof()

    def abandon(self) -> None:
        """Close the connection at once, dropping what the client has not read."""
        self._restore = None
        transport = self._request.transport
        if transport is not None:
            transport.abort()

    async def _bounded(self, writing: Awaitable[object]) -> None:
        self.waiting = True
        try:
            async with asyncio.timeout(self._timeout_seconds):
                await writing
        except TimeoutError:
            raise ClientTooSlow(
                f"the client read nothing for {self._timeout_seconds:g} s") from None
        self.waiting = False

    def _may_wait(self, size: int) -> bool:
        """Whether writing ``size`` more bytes could wait for the client: the transport's
        buffer would pass its high-water mark, or is still draining below it."""
        transport = self._request.transport
        if transport is None:
            return False  # the write fails at once: the client is gone
        high_water = transport.get_write_buffer_limits()[1]
        return (self._request.protocol.writing_paused
                or transport.get_write_buffer_size() + size > high_water)
