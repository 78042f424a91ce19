"""Who runs, who waits and who is turned away: the admission policy, pure (no clock, no I/O).

The service (:mod:`governor.inference.admission.queue`, on asyncio) and the controller benchmark
(in virtual time) drive the same :class:`Ledger`, so a benchmark run admits exactly as the
service would (:mod:`governor.admission.deadline` adds each class's first-token deadline). A
request belongs to a class (``classes`` of slo.yaml), which has a priority (lower ranks higher,
as in vLLM) and may limit how many of its requests run at once:

1. A request runs at once when fewer than ``max_in_flight`` requests run and fewer than its
   class's own limit of its class do. (Nobody waiting could have taken that slot: the ledger
   hands a freed slot over the moment someone can use it.)
2. Otherwise it waits, if the queue has room and its class has fewer than its own
   ``max_queue`` waiting (else it is refused at once, not left to wait out a timeout): deferred.
3. A full queue makes room by shedding its lowest-ranked waiter — the lowest class, the newest
   of it — when that one ranks strictly below the newcomer; otherwise the newcomer is refused.
4. A freed slot goes to the best-ranked waiter allowed to run: the highest class first, first
   come first served within it (and across classes of one priority).

A request that runs is never taken back; shed and refused requests are answered 429 with
``Retry-After`` by the service. One class and no limits of its own is the plain bounded FIFO::

    >>> policy = AdmissionPolicy(1, 1, (ClassLimit("chat", 0), ClassLimit("doc", 10)))
    >>> ledger: Ledger[str] = Ledger(policy)
    >>> ledger.arrive("doc", "d1").verdict, ledger.arrive("doc", "d2").verdict
    (<Verdict.RUN: 'run'>, <Verdict.WAIT: 'wait'>)
    >>> ledger.arrive("chat", "c1")               # the queue is full: d2 makes room
    Decision(verdict=<Verdict.WAIT: 'wait'>, shed=('d2',))
    >>> ledger.release("doc")                     # d1 ends: the chat runs
    [('chat', 'c1')]
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from governor.contracts.metrics.service import DEFAULT_CLASS
from governor.slo.classes import RequestClasses

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ClassLimit:
    name: str
    priority: int = 0  # lower ranks higher
    max_in_flight: int | None = None  # None: only the policy's own limit
    max_queue: int | None = None  # waiting at once; None: only the policy's own queue bound


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    max_in_flight: int
    max_queue: int
    classes: tuple[ClassLimit, ...] = (ClassLimit(DEFAULT_CLASS),)

    def __post_init__(self) -> None:
        names = [c.name for c in self.classes]
        if self.max_in_flight < 1 or self.max_queue < 0:
            raise ValueError("max_in_flight must be positive and max_queue not negative")
        if not names or len(set(names)) != len(names):
            raise ValueError(f"request classes must be named uniquely: {names}")
        if any(c.max_in_flight is not None and c.max_in_flight < 1 for c in self.classes):
            raise ValueError("a class's max_in_flight must be positive")
        if any(c.max_queue is not None and c.max_queue < 0 for c in self.classes):
            raise ValueError("a class's max_queue must not be negative")

    @classmethod
    def of(cls, classes: RequestClasses, max_in_flight: int, max_queue: int) -> AdmissionPolicy:
        """The policy of a spec's classes under the service's own limits."""
        return cls(max_in_flight, max_queue, tuple(
            ClassLimit(c.name, c.priority, c.max_in_flight, c.max_queue)
            for c in classes.classes))


class Verdict(enum.Enum):
    RUN = "run"  # take an engine slot now
    WAIT = "wait"  # queued: a later release hands it a slot
    REJECT = "reject"  # the queue is full of requests that rank as high or higher


@dataclass(frozen=True, slots=True)
class Decision(Generic[T]):
    verdict: Verdict
    shed: tuple[T, ...] = ()  # waiters turned away to make room for this request


class _Class(Generic[T]):
    __slots__ = ("in_flight", "limit", "waiters")

    def __init__(self, limit: ClassLimit) -> None:
        self.limit = limit
        self.in_flight = 0
        self.waiters: deque[tuple[int, T]] = deque()  # (arrival sequence, token), oldest first


class Ledger(Generic[T]):
    """The admission state of one service: who holds a slot, who waits, in which class.

    ``T`` is whatever stands for a waiting request (the service's futures, the benchmark's
    request ids); the ledger only hands tokens back.
    """

    def __init__(self, policy: AdmissionPolicy) -> None:
        self.policy = policy
        self._classes = {c.name: _Class[T](c) for c in policy.classes}
        self._in_flight = 0
        self._waiting = 0
        self._seq = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return self._waiting

    def in_flight_of(self, name: str) -> int:
        return self._class(name).in_flight

    def waiting_of(self, name: str) -> int:
        return len(self._class(name).waiters)

    def arrive(self, name: str, token: T) -> Decision[T]:
        """A request of class ``name`` asks for a slot."""
        state = self._class(name)
        if self._may_run(state):
            self._start(state)
            return Decision(Verdict.RUN)
        own_queue = state.limit.max_queue
        if own_queue is not None and len(state.waiters) >= own_queue:
            return Decision(Verdict.REJECT)
        shed: tuple[T, ...] = ()
        if self._waiting >= self.policy.max_queue:
            victim = self._lowest_waiter()
            if victim is None or victim.limit.priority <= state.limit.priority:
                return Decision(Verdict.REJECT)
            shed = (victim.waiters.pop()[1],)
            self._waiting -= 1
        state.waiters.append((self._seq, token))
        self._seq += 1
        self._waiting += 1
        return Decision(Verdict.WAIT, shed)

    def withdraw(self, name: str, token: T) -> bool:
        """A waiter leaves the queue (timed out, client gone); False if it was not waiting."""
        waiters = self._class(name).waiters
        for entry in waiters:
            if entry[1] == token:
                waiters.remove(entry)
                self._waiting -= 1
                return True
        return False

    def release(self, name: str) -> list[tuple[str, T]]:
        """A running request of class ``name`` ended; returns the waiters that now run."""
        state = self._class(name)
        if state.in_flight == 0:
            raise ValueError(f"class {name!r} has no request in flight to release")
        state.in_flight -= 1
        self._in_flight -= 1
        return self._grant()

    def _class(self, name: str) -> _Class[T]:
        try:
            return self._classes[name]
        except KeyError:
            raise ValueError(f"no request class {name!r} in the admission policy") from None

    def _may_run(self, state: _Class[T]) -> bool:
        cap = state.limit.max_in_flight
        return self._in_flight < self.policy.max_in_flight and (
            cap is None or state.in_flight < cap)

    def _start(self, state: _Class[T]) -> None:
        state.in_flight += 1
        self._in_flight += 1

    def _lowest_waiter(self) -> _Class[T] | None:
        """The class whose newest waiter ranks lowest: the largest priority, then the newest."""
        candidates = [s for s in self._classes.values() if s.waiters]
        if not candidates:
            return None
        return max(candidates, key=lambda s: (s.limit.priority, s.waiters[-1][0]))

    def _grant(self) -> list[tuple[str, T]]:
        granted: list[tuple[str, T]] = []
        while True:
            ready = [s for s in self._classes.values() if s.waiters and self._may_run(s)]
            if not ready:
                return granted
            best = min(ready, key=lambda s: (s.limit.priority, s.waiters[0][0]))
            _, token = best.waiters.popleft()
            self._waiting -= 1
            self._start(best)
            granted.append((best.limit.name, token))
