"""A bounded admission queue in front of the engine.

At most ``max_in_flight`` requests hold an engine slot; up to ``max_queue`` more wait in FIFO
order. A request that finds the queue full is rejected at once (429); one that waits longer than
its timeout is turned away (503). Both carry ``Retry-After``. A waiter whose client goes away
leaves the queue without taking a slot::

    queue = AdmissionQueue(max_in_flight=2, max_queue=8)
    async with queue.slot(timeout_seconds=30):
        ...  # the request runs in the engine
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class QueueFull(Exception):
    """Every slot is taken and the queue is full."""


class QueueTimeout(Exception):
    """No slot freed up within the timeout."""


class AdmissionQueue:
    def __init__(
        self,
        max_in_flight: int,
        max_queue: int,
        *,
        on_change: Callable[[int, int], None] | None = None,
    ) -> None:
        if max_in_flight < 1 or max_queue < 0:
            raise ValueError("max_in_flight must be positive and max_queue not negative")
        self._max_in_flight = max_in_flight
        self._max_queue = max_queue
        self._in_flight = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._on_change = on_change

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, timeout_seconds: float) -> AsyncIterator[None]:
        await self.acquire(timeout_seconds)
        try:
            yield
        finally:
            self.release()

    async def acquire(self, timeout_seconds: float) -> None:
        if self._in_flight < self._max_in_flight and not self._waiters:
            self._in_flight += 1
            self._changed()
            return
        if len(self._waiters) >= self._max_queue:
            raise QueueFull
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._changed()
        try:
            async with asyncio.timeout(timeout_seconds):
                await waiter
        except TimeoutError:
            self._give_up(waiter)
            raise QueueTimeout from None
        except asyncio.CancelledError:
            self._give_up(waiter)
            raise

    def _give_up(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done() and not waiter.cancelled():
            # The slot was handed over just as we gave up: pass it on, not lose it.
            self.release()
        elif waiter in self._waiters:
            self._waiters.remove(waiter)
            self._changed()

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                # The slot passes straight to the next waiter; in_flight is unchanged.
                waiter.set_result(None)
                self._changed()
                return
        self._in_flight -= 1
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self._in_flight, len(self._waiters))
