"""A bounded admission queue in front of the engine, by request class.

At most ``max_in_flight`` requests hold an engine slot (and at most a class's own limit of that
class); up to ``max_queue`` more wait, the highest class first and first come first served
within it. Which request runs, waits, is refused or gives its place up is decided by the pure
policy of :mod:`governor.inference.admission.policy`, which the benchmark shares. A request that
finds the queue full of requests ranking as high is refused at once (:class:`QueueFull`, 429);
one pushed out by a higher class while waiting is turned away (:class:`Shed`, 429); one that
waits longer than its timeout too (:class:`QueueTimeout`, 503). A waiter whose client goes away
leaves the queue without taking a slot::

    queue = AdmissionQueue(max_in_flight=2, max_queue=8)
    async with queue.slot(timeout_seconds=30):
        ...  # the request runs in the engine

Without classes every request is in the default class: the plain bounded FIFO.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from governor.contracts.metrics.service import DEFAULT_CLASS
from governor.inference.admission.policy import AdmissionPolicy, ClassLimit, Ledger, Verdict


class QueueFull(Exception):
    """Every slot is taken and the queue is full of requests that rank as high or higher."""


class Shed(Exception):
    """The request gave its place in the queue to one of a higher class."""


class QueueTimeout(Exception):
    """No slot freed up within the timeout."""


Waiter = asyncio.Future[None]


class AdmissionQueue:
    def __init__(
        self,
        max_in_flight: int,
        max_queue: int,
        *,
        classes: Sequence[ClassLimit] = (ClassLimit(DEFAULT_CLASS),),
    ) -> None:
        self._ledger: Ledger[Waiter] = Ledger(
            AdmissionPolicy(max_in_flight, max_queue, tuple(classes)))

    @property
    def in_flight(self) -> int:
        return self._ledger.in_flight

    @property
    def waiting(self) -> int:
        return self._ledger.waiting

    def in_flight_of(self, name: str) -> int:
        return self._ledger.in_flight_of(name)

    @asynccontextmanager
    async def slot(self, timeout_seconds: float, name: str = DEFAULT_CLASS) -> AsyncIterator[None]:
        await self.acquire(timeout_seconds, name)
        try:
            yield
        finally:
            self.release(name)

    async def acquire(self, timeout_seconds: float, name: str = DEFAULT_CLASS) -> None:
        waiter: Waiter = asyncio.get_running_loop().create_future()
        decision = self._ledger.arrive(name, waiter)
        for pushed_out in decision.shed:
            if not pushed_out.done():  # else cancelled, and its task leaves on its own
                pushed_out.set_exception(Shed())
        if decision.verdict is Verdict.REJECT:
            raise QueueFull
        if decision.verdict is Verdict.RUN:
            return
        try:
            async with asyncio.timeout(timeout_seconds):
                await waiter
        except TimeoutError:
            self._give_up(name, waiter)
            raise QueueTimeout from None
        except asyncio.CancelledError:
            self._give_up(name, waiter)
            raise

    def _give_up(self, name: str, waiter: Waiter) -> None:
        if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
            # The slot was handed over just as we gave up: pass it on, not lose it.
            self.release(name)
        else:
            self._ledger.withdraw(name, waiter)

    def release(self, name: str = DEFAULT_CLASS) -> None:
        granted = self._ledger.release(name)
        while granted:
            owner, waiter = granted.pop(0)
            if waiter.done():
                # Cancelled before it could run (its task has not withdrawn it yet): the slot
                # passes straight on.
                granted += self._ledger.release(owner)
            else:
                waiter.set_result(None)
