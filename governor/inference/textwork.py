"""The text threads, and the turns that keep large requests from flooding the event loop.

Reading, decoding, rendering and tokenizing a request is CPU work the service does before the
request may wait for an engine slot, and a client can send 4 MiB bodies as fast as they are
answered. The work runs in a small pool of threads (``--tokenizer-threads``), apart from the
loop's default executor (which renders ``/metrics``); and a large request (a body over
:data:`SMALL_BODY_BYTES`, or of unknown length) waits for its turn before its body is even
read: no more large requests are read and prepared at once than there are threads. One that
waits is not read, so TCP holds its sender back, and the event loop, which must also stream
everyone's tokens, never reads more than a few large bodies at a time.

A turn is short: its body must arrive at the pace every body must keep
(:func:`governor.inference.http.body.body_allowance_seconds`), or the request ends with a 408, so
that a client trickling its body cannot hold the turns. Clients on slow links send large
prompts through a proxy that buffers request bodies (nginx's default).

Turns go round the clients (:class:`FairTurns`): a client with twenty large requests waiting
does not keep a client with one out for twenty turns; a freed turn goes to the peer address
holding the fewest, then to the one served longest ago. Behind a proxy every request comes
from the proxy's address, and the turns are first come, first served::

    text = TextWork(threads=1)
    async with text.turn(request.content_length, request.remote):
        body = await request.read()      # within body.body_allowance_seconds(...)
        prepared = await text.run(functools.partial(prepare, body))
    text.close()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
# The text threads' names, as a thread dump or a profiler shows them.
TEXT_THREAD_PREFIX = "governor-text"
# A body up to this size costs a fraction of a millisecond to read and decode: it takes no turn.
SMALL_BODY_BYTES = 64 * 1024


class FairTurns:
    """At most ``slots`` holders at once. When a turn frees, it goes to the waiting peer that
    holds the fewest turns, and among those to the one served longest ago; within one peer,
    first come first served. A waiter cancelled (its client gone, its deadline passed) leaves
    its place, and a turn handed to it as it was cancelled goes on to the next. Peers are
    remembered only while they hold or wait."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._holding: Counter[str] = Counter()
        self._served_at: dict[str, int] = {}
        self._grants = 0

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    @property
    def remembered(self) -> int:
        """Peers known: those holding or waiting (the memory stays bounded by them)."""
        return len(self._holding.keys() | self._waiting.keys() | self._served_at.keys())

    async def acquire(self, peer: str) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            self._grant(peer)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(peer, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.release(peer)  # it was given the turn as it was cancelled: pass it on
            else:
                self._forget(peer, turn)
            raise

    def release(self, peer: str) -> None:
        """``peer`` gives its turn back; it goes to the next waiter, or is kept free."""
        self._holding[peer] -= 1
        if self._holding[peer] <= 0:
            del self._holding[peer]
            self._drop_if_idle(peer)
        while self._waiting:
            nxt = min(self._waiting, key=lambda p: (self._holding[p], self._served_at.get(p, -1)))
            queue = self._waiting[nxt]
            turn = queue.popleft()
            if not queue:
                del self._waiting[nxt]
            if not turn.done():
                self._grant(nxt)
                turn.set_result(None)
                return
            self._drop_if_idle(nxt)
        self._free += 1

    def _grant(self, peer: str) -> None:
        self._holding[peer] += 1
        self._grants += 1
        self._served_at[peer] = self._grants

    def _forget(self, peer: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(peer)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del self._waiting[peer]
        self._drop_if_idle(peer)

    def _drop_if_idle(self, peer: str) -> None:
        if peer not in self._holding and peer not in self._waiting:
            self._served_at.pop(peer, None)


class TextWork:
    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=TEXT_THREAD_PREFIX)
        self._turns = FairTurns(threads)

    @staticmethod
    def is_small(body_bytes: int | None) -> bool:
        return body_bytes is not None and body_bytes <= SMALL_BODY_BYTES

    @contextlib.asynccontextmanager
    async def turn(self, body_bytes: int | None, peer: str | None) -> AsyncIterator[None]:
        """Wait until fewer large requests than threads are being read and prepared, in turn
        with the other peers (``peer``: the client's address; ``None`` when unknown, one peer
        for all of those); a small request (its ``Content-Length`` says so) goes straight in."""
        if self.is_small(body_bytes):
            yield
            return
        key = peer or ""
        await self._turns.acquire(key)
        try:
            yield
        finally:
            self._turns.release(key)

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` in a text thread. Cancelled while still queued, it never runs."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    def close(self) -> None:
        # Queued work belongs to requests that are gone; running work ends on its own (bounded).
        self._pool.shutdown(wait=False, cancel_futures=True)
