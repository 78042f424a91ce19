"""The text threads, and the turns that keep large requests from flooding the event loop.

Reading, decoding, rendering and tokenizing a request is CPU work the service does before the
request may wait for an engine slot, and a client can send 4 MiB bodies as fast as they are
answered. The work runs in a small pool of threads (``--tokenizer-threads``), apart from the
loop's default executor (which renders ``/metrics``); and a large request (a body over
:data:`SMALL_BODY_BYTES`, or of unknown length) waits for its turn before its body is even
read: no more large requests are read and prepared at once than there are threads. One that
waits is not read, so TCP holds its sender back, and the event loop, which must also stream
everyone's tokens, never reads more than a few large bodies at a time.

A turn is short: its body must arrive at :data:`MIN_BODY_BYTES_PER_SECOND` or faster, after
:data:`BODY_GRACE_SECONDS` (:func:`body_allowance_seconds`), or the request ends with a 408, so
that a client trickling its body cannot hold the turns. Clients on slow links send large
prompts through a proxy that buffers request bodies (nginx's default)::

    text = TextWork(threads=1)
    async with text.turn(request.content_length):
        body = await request.read()      # within body_allowance_seconds(...)
        prepared = await text.run(functools.partial(prepare, body))
    text.close()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
# The text threads' names, as a thread dump or a profiler shows them.
TEXT_THREAD_PREFIX = "governor-text"
# A body up to this size costs a fraction of a millisecond to read and decode: it takes no turn.
SMALL_BODY_BYTES = 64 * 1024
# How fast a large body must arrive while its request holds a turn: 4 MiB within 5 s.
BODY_GRACE_SECONDS = 1.0
MIN_BODY_BYTES_PER_SECOND = 1024 * 1024


def body_allowance_seconds(body_bytes: int | None, max_body_bytes: int) -> float:
    """How long a body of ``body_bytes`` (its ``Content-Length``; ``None``: as large as the
    service accepts) may take to arrive while its request holds a turn."""
    size = max_body_bytes if body_bytes is None else min(body_bytes, max_body_bytes)
    return BODY_GRACE_SECONDS + size / MIN_BODY_BYTES_PER_SECOND


class TextWork:
    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=TEXT_THREAD_PREFIX)
        self._turns = asyncio.Semaphore(threads)

    @staticmethod
    def is_small(body_bytes: int | None) -> bool:
        return body_bytes is not None and body_bytes <= SMALL_BODY_BYTES

    @contextlib.asynccontextmanager
    async def turn(self, body_bytes: int | None) -> AsyncIterator[None]:
        """Wait, first come first served, until fewer large requests than threads are being
        read and prepared; a small request (its ``Content-Length`` says so) goes straight in."""
        if self.is_small(body_bytes):
            yield
            return
        async with self._turns:
            yield

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` in a text thread. Cancelled while still queued, it never runs."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    def close(self) -> None:
        # Queued work belongs to requests that are gone; running work ends on its own (bounded).
        self._pool.shutdown(wait=False, cancel_futures=True)
