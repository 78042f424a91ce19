"""A bounded admission queue in front of the engine, by request class and deadline.

At most ``max_in_flight`` requests hold an engine slot (and at most a class's own limit of that
class); up to ``max_queue`` more wait, the highest class first and first come first served
within it. Which request runs, waits, is refused or gives its place up is decided by the pure
policies of :mod:`governor.admission`, which the benchmark shares: the class ledger
(:mod:`~governor.admission.policy`) and the deadline gate (:mod:`~governor.admission.deadline`).
A request is refused at once when the prompt tokens ahead of it, and its own, would take longer
to prefill than its class's first-token deadline leaves (:class:`TooLate`, 429), or when the
queue is full of requests ranking as high (:class:`QueueFull`, 429); one pushed out by a higher
class while waiting is turned away (:class:`Shed`, 429), one still waiting when its deadline
passes too (:class:`DeadlinePassed`, 429, before it reaches the engine), and one that waits
longer than its timeout gets :class:`QueueTimeout` (503). A waiter whose client goes away
leaves the queue without taking a slot; a request that runs is never taken back::

    queue = AdmissionQueue(max_in_flight=2, max_queue=8)
    async with queue.slot(timeout_seconds=30, tokens=812) as ticket:
        ...  # the request runs in the engine
        queue.first_token(ticket)  # its prompt is prefilled: the gate measures the rate

Without classes every request is in the default class: the plain bounded FIFO, and without
first-token targets no deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from governor.admission.deadline import (
    ClassDeadline,
    DeadlineGate,
    DeadlineSettings,
    Judgement,
    WaitSample,
)
from governor.admission.policy import AdmissionPolicy, ClassLimit, Ledger, Verdict
from governor.contracts.metrics.service import DEFAULT_CLASS


class QueueFull(Exception):
    """Every slot is taken and the queue is full of requests that rank as high or higher."""


class Shed(Exception):
    """The request gave its place in the queue to one of a higher class."""


class QueueTimeout(Exception):
    """No slot freed up within the timeout."""


class TooLate(Exception):
    """Refused at arrival: the prompt tokens ahead would keep it past its deadline (or past the
    bound on tokens ahead)."""

    def __init__(self, judgement: Judgement) -> None:
        super().__init__(judgement.reason)
        self.judgement = judgement


class DeadlinePassed(Exception):
    """Shed while waiting: its deadline passed before an engine slot came free."""

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__("deadline passed")
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True, slots=True, eq=False)
class Ticket:
    """One admitted request: the deadline gate follows it to its first token."""

    name: str
    judgement: Judgement


Waiter = asyncio.Future[None]


class AdmissionQueue:
    def __init__(
        self,
        max_in_flight: int,
        max_queue: int,
        *,
        classes: Sequence[ClassLimit] = (ClassLimit(DEFAULT_CLASS),),
        first_token_targets: dict[str, float] | None = None,
        deadlines: DeadlineSettings | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._ledger: Ledger[Waiter] = Ledger(
            AdmissionPolicy(max_in_flight, max_queue, tuple(classes)))
        targets = first_token_targets or {}
        self.gate: DeadlineGate[Ticket] = DeadlineGate(
            tuple(ClassDeadline(c.name, c.priority, targets.get(c.name)) for c in classes),
            deadlines)
        self._clock = clock

    @property
    def in_flight(self) -> int:
        return self._ledger.in_flight

    @property
    def waiting(self) -> int:
        return self._ledger.waiting

    def in_flight_of(self, name: str) -> int:
        return self._ledger.in_flight_of(name)

    @asynccontextmanager
    async def slot(self, timeout_seconds: float, name: str = DEFAULT_CLASS, *,
                   tokens: int = 0) -> AsyncIterator[Ticket]:
        ticket = await self.acquire(timeout_seconds, name, tokens=tokens)
        try:
            yield ticket
        finally:
            self.release(name, ticket)

    def refused_whatever_its_length(self, names: tuple[str, ...], waited: float
                                    ) -> dict[str, Judgement] | None:
        """Each class's refusal of a request that could be any of ``names``, judged before its
        prompt is read: the tokens already ahead alone keep it past its deadline (or past the
        bound) in every one of them, so its own prompt, whatever its length, cannot change the
        verdict (a longer one only waits longer). ``None``: admitted in one of them, or no
        rate is measured yet; the request is then read, tokenized and judged as usual."""
        return self.refused_with_at_least(names, 0, waited)

    def refused_with_at_least(self, names: tuple[str, ...], tokens: int, waited: float
                              ) -> dict[str, Judgement] | None:
        """Each class's refusal of a request that could be any of ``names`` and whose prompt
        has ``tokens`` tokens or more, judged before it is tokenized: refused with ``tokens``
        in every one of them, it is refused with any more (a longer prompt only waits longer).
        ``None``: admitted in one of them, or no rate is measured yet."""
        if not names or self.gate.rate is None:
            return None
        now = self._clock()
        judgements = {name: self.gate.judge(name, tokens, now, waited=waited) for name in names}
        return None if any(j.admit for j in judgements.values()) else judgements

    def may_refuse(self, names: tuple[str, ...], tokens: int, waited: float) -> bool:
        """Whether a request that could be any of ``names``, of at most ``tokens`` prompt
        tokens, may be refused in one of them (it is admitted in all with that many)."""
        if self.gate.rate is None:
            return False
        now = self._clock()
        return any(not self.gate.judge(name, tokens, now, waited=waited).admit for name in names)

    async def acquire(self, timeout_seconds: float, name: str = DEFAULT_CLASS, *,
                      tokens: int = 0, waited: float = 0.0) -> Ticket:
        """An engine slot for a request of ``tokens`` prompt tokens that arrived ``waited``
        seconds ago; its ticket goes back with :meth:`release`."""
        judgement = self.gate.judge(name, tokens, self._clock(), waited=waited)
        if not judgement.admit:
            raise TooLate(judgement)
        waiter: Waiter = asyncio.get_running_loop().create_future()
        decision = self._ledger.arrive(name, waiter)
        for pushed_out in decision.shed:
            if not pushed_out.done():  # else cancelled, and its task leaves on its own
                pushed_out.set_exception(Shed())
        if decision.verdict is Verdict.REJECT:
            raise QueueFull
        ticket = Ticket(name, judgement)
        running = decision.verdict is Verdict.RUN
        self.gate.track(ticket, name, tokens, self._clock(), waiting=not running,
                        judgement=judgement)
        if not running:
            await self._wait(ticket, waiter, timeout_seconds, tokens)
        return ticket

    async def _wait(self, ticket: Ticket, waiter: Waiter, timeout_seconds: float,
                    tokens: int) -> None:
        name, left = ticket.name, ticket.judgement.deadline_seconds
        by_deadline = left is not None and left < timeout_seconds
        try:
            async with asyncio.timeout(left if by_deadline and left is not None
                                       else timeout_seconds):
                await waiter
        except TimeoutError:
            self._give_up(name, waiter, ticket)
            if by_deadline:
                raise DeadlinePassed(self._retry_after(name, tokens)) from None
            raise QueueTimeout from None
        except (asyncio.CancelledError, Shed):
            self._give_up(name, waiter, ticket)
            raise
        self.gate.start(ticket, self._clock())

    def _retry_after(self, name: str, tokens: int) -> int:
        """What a request of this class arriving now would be told (at least a second)."""
        return self.gate.judge(name, tokens, self._clock()).retry_after_seconds

    def _give_up(self, name: str, waiter: Waiter, ticket: Ticket) -> None:
        self.gate.forget(ticket, self._clock())
        if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
            # The slot was handed over just as we gave up: pass it on, not lose it.
            self.release(name)
        else:
            self._ledger.withdraw(name, waiter)

    def first_token(self, ticket: Ticket, now: float | None = None) -> WaitSample | None:
        """The request's first token (at ``now`` on the queue's clock): its prompt is prefilled.
        Returns the wait predicted at its admission against the real one, the first time."""
        return self.gate.first_token(ticket, self._clock() if now is None else now)

    def release(self, name: str = DEFAULT_CLASS, ticket: Ticket | None = None) -> None:
        """A running request ended (with ``ticket``: the gate forgets it, if its first token
        never came)."""
        if ticket is not None:
            self.gate.forget(ticket, self._clock())
        granted = self._ledger.release(name)
        while granted:
            owner, waiter = granted.pop(0)
            if waiter.done():
                # Cancelled before it could run (its task has not withdrawn it yet): the slot
                # passes straight on.
                granted += self._ledger.release(owner)
            else:
                waiter.set_result(None)

