"""The service's admission queue in virtual time, through the service's own policies.

:class:`Gatekeeper` drives the same :class:`~governor.admission.policy.Ledger` and
:class:`~governor.admission.deadline.DeadlineGate` as ``governor serve``: a request that arrives
is refused when the prompt tokens ahead would keep it past its first-token deadline (or past a
static bound on tokens ahead), else runs, waits or is refused by the ledger; a waiter may be
shed for a higher class; a freed slot goes to the best-ranked waiter; a waiter gives up after
the queue timeout, or is shed once its deadline passes. It plugs into
:class:`~governor.inference.engines.sim.virtual.VirtualSim` as its gate (arrivals), its
``on_first_token`` (the gate measures the prefill rate) and its ``on_finish`` (the slot comes
free when the response's last token reaches the caller, as the service releases it)::

    keeper = Gatekeeper(AdmissionPolicy.of(classes, 512, 1024), 60.0, class_of, tokens_of)
    sim = VirtualSim(preset, gate=keeper.arrive, on_first_token=keeper.first_token,
                     on_finish=keeper.finished, policy="priority")

Each waiter's deadline is checked at every later event, before anything is granted, so a timed
out request never runs and leaves at its deadline.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from governor.admission.deadline import ClassDeadline, DeadlineGate, DeadlineSettings
from governor.admission.policy import AdmissionPolicy, Ledger, Verdict
from governor.contracts.metrics.service import (
    REASON_DEADLINE,
    REASON_DEADLINE_PASSED,
    REASON_QUEUE_FULL,
    REASON_QUEUE_TIMEOUT,
    REASON_SHED,
    REASON_TOKENS_AHEAD,
)
from governor.inference.config import AdmissionSettings
from governor.inference.engines.sim.virtual import RequestRecord, VirtualSim

# How a request the service never ran was answered: refused at arrival or turned away after
# waiting (429), or timed out (503).
TURNED_AWAY: Final = (REASON_QUEUE_FULL, REASON_DEADLINE, REASON_TOKENS_AHEAD, REASON_SHED,
                      REASON_DEADLINE_PASSED, REASON_QUEUE_TIMEOUT)


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


@dataclass(frozen=True, slots=True)
class Deadlines:
    """What the deadline gate knows: each class's first-token target (None: no deadline), and
    its settings (the slack, a static bound on tokens ahead)."""

    targets: Mapping[str, float | None]
    settings: DeadlineSettings


class Gatekeeper:
    def __init__(self, policy: AdmissionPolicy, queue_timeout_seconds: float,
                 class_of: Mapping[str, str], tokens_of: Mapping[str, int] | None = None,
                 deadlines: Deadlines | None = None) -> None:
        self._ledger: Ledger[str] = Ledger(policy)
        self._timeout = queue_timeout_seconds
        self._class_of = class_of
        self._tokens_of = tokens_of or {}
        targets = deadlines.targets if deadlines else {}
        self.gate: DeadlineGate[str] = DeadlineGate(
            tuple(ClassDeadline(c.name, c.priority, targets.get(c.name))
                  for c in policy.classes), deadlines.settings if deadlines else None)
        # (give up at, why, request id) of waiters: the queue timeout, or its deadline.
        self._deadlines: list[tuple[float, str, str]] = []
        self._waiting: set[str] = set()
        # Request id → why it never ran (TURNED_AWAY); absent: it ran.
        self.turned_away: dict[str, str] = {}
        # Requests that waited in the admission queue (ran later, or were turned away).
        self.queued: set[str] = set()
        # (predicted, actual) wait from the decision to the first token, where it predicted.
        self.waits: list[tuple[float, float]] = []

    def arrive(self, sim: VirtualSim, request_id: str, at: float) -> bool:
        """The gate: True lets the request in now; False holds it (it waits, or is refused)."""
        self._expire(sim, at)
        name, tokens = self._class_of[request_id], self._tokens_of.get(request_id, 0)
        judgement = self.gate.judge(name, tokens, at)
        if not judgement.admit:
            self._leave(sim, request_id, at, judgement.reason, waiting=False)
            return False
        decision = self._ledger.arrive(name, request_id)
        for shed in decision.shed:
            self._leave(sim, shed, at, REASON_SHED)
        if decision.verdict is Verdict.RUN:
            self.gate.track(request_id, name, tokens, at, waiting=False, judgement=judgement)
            return True
        if decision.verdict is Verdict.REJECT:
            self._leave(sim, request_id, at, REASON_QUEUE_FULL, waiting=False)
            return False
        self.gate.track(request_id, name, tokens, at, waiting=True, judgement=judgement)
        self._waiting.add(request_id)
        self.queued.add(request_id)
        left = judgement.deadline_seconds
        if left is not None and left < self._timeout:
            heapq.heappush(self._deadlines, (at + max(0.0, left), REASON_DEADLINE_PASSED,
                                             request_id))
        else:
            heapq.heappush(self._deadlines, (at + self._timeout, REASON_QUEUE_TIMEOUT,
                                             request_id))
        return False

    def first_token(self, sim: VirtualSim, request_id: str, at: float) -> None:
        """A request's first token reached its caller: its prompt is prefilled."""
        sample = self.gate.first_token(request_id, at)
        if sample is not None and sample.predicted_seconds is not None:
            self.waits.append((sample.predicted_seconds, sample.actual_seconds))

    def finished(self, sim: VirtualSim, record: RequestRecord) -> None:
        """A response ended (its last token reached the caller): its slot goes on."""
        at = record.finish_time
        self._expire(sim, at)
        self.gate.forget(record.request_id, at)
        for _, granted in self._ledger.release(self._class_of[record.request_id]):
            self._waiting.discard(granted)
            self.gate.start(granted, at)
            sim.admit(granted, at)

    def _expire(self, sim: VirtualSim, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, reason, request_id = heapq.heappop(self._deadlines)
            if request_id in self._waiting:
                self._ledger.withdraw(self._class_of[request_id], request_id)
                self._leave(sim, request_id, deadline, reason)

    def _leave(self, sim: VirtualSim, request_id: str, at: float, reason: str, *,
               waiting: bool = True) -> None:
        if waiting:
            self._waiting.discard(request_id)
            self.gate.forget(request_id, at)
        self.turned_away[request_id] = reason
        sim.turn_away(request_id, at)


def deadlines_of(targets: Mapping[str, float | None], *, slack: float | None,
                 max_tokens_ahead: int | None, calibration: float | None = None
                 ) -> Deadlines | None:
    """The gate a run puts in front of the engine: first-token deadlines (``slack`` times each
    class's target; None: none), a static bound on tokens ahead, either or both; None: neither.
    ``calibration``: the deadlines' calibration quantile (None: off)."""
    if slack is None and max_tokens_ahead is None:
        return None
    return Deadlines(targets if slack is not None else {},
                     DeadlineSettings(slack=slack if slack is not None else 1.0,
                                      max_tokens_ahead=max_tokens_ahead,
                                      calibration_quantile=calibration))


def bound_label(tokens: int | None) -> str:
    """``32k`` for a bound of 32 768 tokens ahead; ``none`` for no bound."""
    if tokens is None:
        return "none"
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)

