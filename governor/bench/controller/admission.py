"""The service's admission queue in virtual time, through the service's own policy.

:class:`Gatekeeper` drives the same :class:`~governor.inference.admission.policy.Ledger` as
``governor serve``: a request that arrives runs, waits or is refused; a waiter may be shed for a
higher class; a freed slot goes to the best-ranked waiter; a waiter gives up after the queue
timeout. It plugs into :class:`~governor.inference.engines.sim.virtual.VirtualSim` as its gate
(arrivals) and its ``on_finish`` (the slot comes free when the response's last token reaches
the caller, as the service releases it)::

    keeper = Gatekeeper(AdmissionPolicy.of(classes, 512, 1024), 60.0, class_of)
    sim = VirtualSim(preset, gate=keeper.arrive, on_finish=keeper.finished, policy="priority")

Each waiter's deadline is checked at every later event, before anything is granted, so a timed
out request never runs and leaves at its deadline.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from governor.contracts.metrics.service import (
    REASON_QUEUE_FULL,
    REASON_QUEUE_TIMEOUT,
    REASON_SHED,
)
from governor.inference.admission.policy import AdmissionPolicy, Ledger, Verdict
from governor.inference.config import AdmissionSettings
from governor.inference.engines.sim.virtual import RequestRecord, VirtualSim

# How a request the service never ran was answered: shed or refused (429), timed out (503).
TURNED_AWAY: Final = (REASON_SHED, REASON_QUEUE_FULL, REASON_QUEUE_TIMEOUT)


@dataclass(frozen=True, slots=True)
class Limits:
    """The service's admission settings the benchmark runs with (``governor serve``'s)."""

    max_in_flight: int
    max_queue: int
    queue_timeout_seconds: float

    @classmethod
    def service_defaults(cls) -> Limits:
        settings = AdmissionSettings()
        return cls(settings.max_in_flight, settings.max_queue, settings.queue_timeout_seconds)


class Gatekeeper:
    def __init__(self, policy: AdmissionPolicy, queue_timeout_seconds: float,
                 class_of: Mapping[str, str]) -> None:
        self._ledger: Ledger[str] = Ledger(policy)
        self._timeout = queue_timeout_seconds
        self._class_of = class_of
        self._deadlines: list[tuple[float, str]] = []  # (give up at, request id) of waiters
        self._waiting: set[str] = set()
        # Request id → why it never ran (TURNED_AWAY); absent: it ran.
        self.turned_away: dict[str, str] = {}
        # Requests that waited in the admission queue (ran later, or were turned away).
        self.queued: set[str] = set()

    def arrive(self, sim: VirtualSim, request_id: str, at: float) -> bool:
        """The gate: True lets the request in now; False holds it (it waits, or is refused)."""
        self._expire(sim, at)
        decision = self._ledger.arrive(self._class_of[request_id], request_id)
        for shed in decision.shed:
            self._leave(sim, shed, at, REASON_SHED)
        if decision.verdict is Verdict.RUN:
            return True
        if decision.verdict is Verdict.REJECT:
            self._leave(sim, request_id, at, REASON_QUEUE_FULL, waiting=False)
            return False
        self._waiting.add(request_id)
        self.queued.add(request_id)
        heapq.heappush(self._deadlines, (at + self._timeout, request_id))
        return False

    def finished(self, sim: VirtualSim, record: RequestRecord) -> None:
        """A response ended (its last token reached the caller): its slot goes on."""
        at = record.finish_time
        self._expire(sim, at)
        for _, granted in self._ledger.release(self._class_of[record.request_id]):
            self._waiting.discard(granted)
            sim.admit(granted, at)

    def _expire(self, sim: VirtualSim, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, request_id = heapq.heappop(self._deadlines)
            if request_id in self._waiting:
                self._ledger.withdraw(self._class_of[request_id], request_id)
                self._leave(sim, request_id, deadline, REASON_QUEUE_TIMEOUT)

    def _leave(self, sim: VirtualSim, request_id: str, at: float, reason: str, *,
               waiting: bool = True) -> None:
        if waiting:
            self._waiting.discard(request_id)
        self.turned_away[request_id] = reason
        sim.turn_away(request_id, at)
