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
no timer per token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from aiohttp import web


class ClientTooSlow(Exception):
    """A write waited longer than the write timeout for the client to read."""


class ClientWriter:
    """Writes one response; every wait for the client is bounded by ``timeout_seconds``."""

    __slots__ = ("_request", "_timeout_seconds", "response", "waiting")

    def __init__(
        self, request: web.Request, response: web.StreamResponse, timeout_seconds: float
    ) -> None:
        self._request = request
        self._timeout_seconds = timeout_seconds
        self.response = response
        # True while a write waits for the client, and left True when that wait is cancelled
        # (the request's deadline): who was waiting on whom when time ran out.
        self.waiting = False

    async def prepare(self) -> None:
        """Send the status line and headers."""
        await self._bounded(self.response.prepare(self._request))

    async def write(self, data: bytes) -> None:
        if self._may_wait(len(data)):
            await self._bounded(self.response.write(data))
        else:
            await self.response.write(data)

    async def write_eof(self) -> None:
        await self._bounded(self.response.write_eof())

    async def send(self) -> None:
        """Send a whole response that the handler built but did not send (its body)."""
        await self._bounded(self._send_whole())

    async def _send_whole(self) -> None:
        await self.response.prepare(self._request)
        await self.response.write_eof()

    def abandon(self) -> None:
        """Close the connection at once, dropping what the client has not read."""
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
