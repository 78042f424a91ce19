"""The scheduler's waiting queue under vLLM's two policies (``v1/core/sched/request_queue.py``).

* ``fcfs`` (:class:`FcfsQueue`, vLLM's ``FCFSRequestQueue``): arrival order; a preempted request
  goes back to the front.
* ``priority`` (:class:`PriorityQueue`, vLLM's ``PriorityRequestQueue``): a heap ordered by
  ``(priority, arrival_time)`` — lower priority values first — then by request (vLLM compares
  request ids; here the order requests first reached the scheduler). A preempted request goes
  back by that same rank, not to the front::

      queue = PriorityQueue()
      queue.add(doc)          # priority 10, arrived first
      queue.add(chat)         # priority 0
      queue.peek() is chat    # True
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from governor.inference.engines.settings import SCHEDULING_POLICIES, SchedulingPolicy
from governor.inference.engines.sim.request import SimRequest


class WaitingQueue(Protocol):
    def add(self, request: SimRequest) -> None: ...

    def prepend(self, request: SimRequest) -> None:
        """Put a preempted request back."""

    def peek(self) -> SimRequest: ...

    def pop_first(self) -> SimRequest: ...

    def remove(self, request: SimRequest) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[SimRequest]: ...


class FcfsQueue(deque[SimRequest]):
    """A deque, so that the default policy costs what it always did."""

    __slots__ = ()

    def add(self, request: SimRequest) -> None:
        self.append(request)

    def prepend(self, request: SimRequest) -> None:
        self.appendleft(request)

    def peek(self) -> SimRequest:
        return self[0]

    def pop_first(self) -> SimRequest:
        return self.popleft()


class PriorityQueue:
    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[tuple[int, float, int], SimRequest]] = []

    def add(self, request: SimRequest) -> None:
        heapq.heappush(self._heap, (request.rank, request))

    def prepend(self, request: SimRequest) -> None:
        self.add(request)  # no front in a priority queue: its rank decides, as in vLLM

    def peek(self) -> SimRequest:
        return self._heap[0][1]

    def pop_first(self) -> SimRequest:
        return heapq.heappop(self._heap)[1]

    def remove(self, request: SimRequest) -> None:
        before = len(self._heap)
        self._heap = [entry for entry in self._heap if entry[1] is not request]
        if len(self._heap) == before:
            raise ValueError(f"{request!r} is not waiting")
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[SimRequest]:
        """In rank order."""
        return (request for _, request in sorted(self._heap))


def waiting_queue(policy: SchedulingPolicy) -> WaitingQueue:
    if policy == "priority":
        return PriorityQueue()
    if policy == "fcfs":
        return FcfsQueue()
    raise ValueError(f"unknown scheduling policy {policy!r} (one of {SCHEDULING_POLICIES})")
