"""How one client of a drill sends a request and reads its answer: as any client does, or slowly.

:func:`send` posts a chat completion and reads the whole answer, returning an :class:`Outcome`.
A :class:`~governor.drills.workload.SlowReader` client opens its own socket with a small receive
buffer and reads a few hundred bytes at a time with pauses between, so that once the buffers
between it and the server are full the server's writes wait for it; a
:class:`~governor.drills.workload.SlowBody` client sends its body in small chunks with pauses
(chunked transfer encoding), so the server's clock runs before the prompt is in hand::

    async with aiohttp.ClientSession() as session:
        outcome = await send(session, "http://127.0.0.1:8000", body, SlowBody(256, 0.3))

Only the drill's own load uses these, and only against the stack it started on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH
from governor.drills.workload import Behaviour, SlowBody, SlowReader


@dataclass(frozen=True, slots=True)
class Outcome:
    status: int  # 0: no answer (the connection failed)
    seconds: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


async def send(session: aiohttp.ClientSession, base_url: str, body: Mapping[str, object],
               client: Behaviour = None) -> Outcome:
    """Post ``body`` to the chat completions route of ``base_url`` as ``client`` behaves, and
    read the whole answer."""
    started = time.perf_counter()
    try:
        if isinstance(client, SlowReader):
            status = await _read_slowly(base_url, body, client)
        else:
            status = await _post(session, base_url, body, client)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        return Outcome(0, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"[:200])
    return Outcome(status, time.perf_counter() - started)


async def _post(session: aiohttp.ClientSession, base_url: str, body: Mapping[str, object],
                client: SlowBody | None) -> int:
    raw = json.dumps(body).encode()
    data: bytes | AsyncIterator[bytes] = raw if client is None else trickle(raw, client)
    async with session.post(base_url + CHAT_COMPLETIONS_PATH, data=data,
                            headers={"Content-Type": "application/json"}) as response:
        async for _ in response.content.iter_any():
            pass
        return response.status


async def trickle(raw: bytes, client: SlowBody) -> AsyncIterator[bytes]:
    """``raw`` in chunks of ``client.chunk_bytes``, ``client.pause_seconds`` apart."""
    for start in range(0, len(raw), client.chunk_bytes):
        if start:
            await asyncio.sleep(client.pause_seconds)
        yield raw[start:start + client.chunk_bytes]


async def _read_slowly(base_url: str, body: Mapping[str, object], client: SlowReader) -> int:
    """One request on a socket of our own, its answer read slowly; the answer's status."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    reader, writer = await open_slow_connection(host, port, client)
    try:
        raw = json.dumps(body).encode()
        writer.write(request_head(host, port, len(raw)) + raw)
        await writer.drain()
        status = parse_status(await reader.readline())
        while True:
            await asyncio.sleep(client.pause_seconds)
            if not await reader.read(client.read_bytes):
                return status
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def open_slow_connection(host: str, port: int, client: SlowReader
                               ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose receive buffer is small in the kernel (set before connecting, so the
    window the client offers is small) and in the stream reader (which stops reading from the
    socket past twice its limit), with small segments (the server's send buffer grows with
    them)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, client.receive_buffer_bytes)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, client.segment_bytes)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except OSError:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock, limit=client.read_bytes)


def request_head(host: str, port: int, length: int) -> bytes:
    """The head of an HTTP/1.1 chat completion request with a JSON body of ``length`` bytes,
    on a connection closed after the answer (so its end is the answer's end)."""
    return (f"POST {CHAT_COMPLETIONS_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
            "Connection: close\r\n\r\n").encode()


def parse_status(line: bytes) -> int:
    """``b"HTTP/1.1 200 OK\\r\\n"`` → 200; ``ValueError`` for anything else."""
    parts = line.split(maxsplit=2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP status line: {line[:80]!r}")
    return int(parts[1])
