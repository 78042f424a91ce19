"""The level-triggered reconcile loop.

Alerts only wake it; every pass reads the actual state — observations from Prometheus, limits
from each target — asks the pure law what to do, and applies the answer idempotently. A pass
also runs every ``resync_seconds`` without any alert. Each pass records what started it (its
``woken_by``: the alerts a webhook notification woke it for, by name, the periodic check, or the
start), and so does every audit line it writes. Per target it keeps the law's state (which
is persisted after every pass that changed it), the last decision and error, and a backoff::

    reconciler = Reconciler(config, observer, actuator, store, audit, metrics, book)
    task = asyncio.create_task(reconciler.run())
    reconciler.wake(["InterTokenLatencyP99High"])   # e.g. from the webhook
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from governor.contracts.alerting import WOKEN_AT_START, WOKEN_BY_ALERT, WOKEN_PERIODIC
from governor.contracts.metrics import controller as names
from governor.controller import audit as audit_lines
from governor.controller import start_limits
from governor.controller.actuator import ActuationError, ErrorKind
from governor.controller.actuators import Actuator as Actuator  # the reconciler's seam
from governor.controller.audit import AuditLog
from governor.controller.config import ControllerConfig, valid_instance
from governor.controller.intake import AlertBook
from governor.controller.law.decide import decide
from governor.controller.metrics import ControllerMetrics
from governor.controller.model import Decision, Observation, Target, TargetLimits, TargetState
from governor.controller.observe import PrometheusError, Snapshot
from governor.controller.state import PersistedTarget, StateStore

log = logging.getLogger(__name__)

_NO_DATA = Observation(itl_tail_seconds=None, itl_median_seconds=None)


class Observer(Protocol):
    async def snapshot(self, instances: Iterable[str]) -> Snapshot: ...


class Annotator(Protocol):
    async def annotate(self, target: str, decision: Decision, at: float) -> bool: ...


# Distinct warnings remembered so each is logged once; past this the memory starts over.
MAX_NOTED = 256
# Alert names a pass remembers as what woke it; more, from a hostile sender, are not kept.
MAX_WAKING_ALERTS = 16

@dataclass
class TargetRuntime:
    """What the controller knows about one target (``state`` is the persisted part)."""

    target: Target
    state: TargetState = field(default_factory=TargetState)
    limits: TargetLimits | None = None
    observation: Observation | None = None
    last_decision: dict[str, Any] | None = None
    last_result: str | None = None
    last_error: str | None = None
    failures: int = 0
    retry_at: float = 0.0
    recent: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=20))


class Reconciler:
    def __init__(
        self, config: ControllerConfig, observer: Observer, actuator: Actuator,
        store: StateStore, audit: AuditLog, metrics: ControllerMetrics, book: AlertBook, *,
        annotator: Annotator | None = None, clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._observer, self._actuator, self._store = observer, actuator, store
        self._audit, self._metrics, self._book = audit, metrics, book
        self._annotator = annotator
        self._clock = clock
        self._wake = asyncio.Event()
        self._waking: set[str] = set()  # the alerts named by the wake-ups since the last pass
        self._lock = asyncio.Lock()
        self.targets: dict[str, TargetRuntime] = {}
        self.last_pass_at: float | None = None
        # What started the last pass (or the one in progress), as audit_lines.what_woke says it.
        self.woken_by: dict[str, Any] | None = None
        self.prometheus_error: str | None = None
        # Why the last state could not be written (a full or read-only disk), until one is.
        self.state_error: str | None = None
        self._ignored_instances: set[str] = set()  # warnings already given (bounded)
        self._last_seen: dict[str, float] = {}
        for name, persisted in list(store.load().items())[:config.max_targets]:
            runtime = self._runtime(Target(name, persisted.url))
            runtime.state = persisted.state
        metrics.dry_run.set(1 if config.dry_run else 0)

    def wake(self, alerts: Iterable[str] = ()) -> None:
        """Start a pass now, for ``alerts`` (their names: what the next pass records as having
        woken it)."""
        for name in alerts:
            if len(self._waking) >= MAX_WAKING_ALERTS:
                break
            self._waking.add(name)
        self._wake.set()

    async def run(self) -> None:
        """Reconcile forever: on every wake-up, and every ``resync_seconds`` regardless."""
        trigger = WOKEN_AT_START
        while True:
            try:
                await self.reconcile_once(trigger)
            except Exception:  # a bug in one pass must not end the loop
                log.exception("reconcile pass failed")
            trigger = WOKEN_PERIODIC  # unless a wake-up comes first
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.resync_seconds)

    async def reconcile_once(self, trigger: str = WOKEN_PERIODIC) -> None:
        """One pass; ``trigger`` is what started it unless a wake-up is pending, which it takes
        (the alerts it names are then what woke the pass)."""
        async with self._lock:
            if self._wake.is_set():
                trigger = WOKEN_BY_ALERT
            self.woken_by = audit_lines.what_woke(trigger, sorted(self._waking))
            self._wake.clear()
            self._waking.clear()
            started = time.perf_counter()
            await self._pass()
            self._metrics.reconcile_duration.observe(time.perf_counter() - started)
            self.last_pass_at = self._clock()
            self._metrics.last_reconcile.set(self.last_pass_at)
            self._book.expire(self.last_pass_at)
            self._metrics.alerts_firing.set(len(self._book.firing()))

    async def _pass(self) -> None:
        static = {t.name for t in self.config.static_targets}
        try:
            snapshot = await self._observer.snapshot(static | set(self.targets))
            self.prometheus_error = None
        except PrometheusError as exc:
            if self.prometheus_error != str(exc):
                log.warning("prometheus unavailable, holding every target: %s", exc)
            self.prometheus_error = str(exc)
            for _ in self._managed(static, frozenset()):
                self._metrics.reconciles.labels(names.RESULT_TEMPORARY_ERROR).inc()
            return
        managed = self._managed(static, snapshot.scraped_instances)
        self._warn_unknown_alert_instances(managed)
        self._forget_vanished(managed, self._clock())
        before = {name: rt.state for name, rt in self.targets.items()}
        await asyncio.gather(*(self._isolated(name, snapshot.observations.get(name, _NO_DATA))
                               for name in sorted(managed)))
        if any(before.get(name) != rt.state for name, rt in self.targets.items()):
            await self._persist()

    async def _isolated(self, name: str, observation: Observation) -> None:
        """Reconcile one target; a failure of the controller's own on it is that target's
        result (logged, counted, shown, retried with backoff), never the whole pass's, so the
        others' decisions and state are kept (controller-runtime isolates each key alike)."""
        runtime = self.targets.get(name)
        try:
            runtime = self._runtime(self.config.target_for(name))
            await self._within_deadline(runtime, observation)
        except Exception as exc:
            error = f"internal error: {type(exc).__name__}: {str(exc)[:200]}"
            if runtime is None or runtime.last_error != error:  # each new failure, once
                log.exception("target %s: reconcile failed", name[:80])
            self._metrics.reconciles.labels(names.RESULT_INTERNAL_ERROR).inc()
            if runtime is not None:
                self._backoff(runtime, names.RESULT_INTERNAL_ERROR, error, self._clock())

    async def _within_deadline(self, rt: TargetRuntime, observation: Observation) -> None:
        """Reconcile one target within ``target_deadline_seconds``: past it, a temporary error
        (retried with backoff), so that one slow or stalling target never holds the pass, and
        with it every other target, for longer. A change it cut short in flight is absolute:
        the next pass reads what is in force."""
        deadline = self.config.target_deadline_seconds
        try:
            async with asyncio.timeout(deadline) as scope:
                await self._reconcile(rt, observation)
        except TimeoutError:
            if not scope.expired():
                raise
            self._failed(rt, ActuationError(
                ErrorKind.TEMPORARY, f"no answer within the pass's deadline for one target "
                                     f"({deadline:g}s, --target-deadline)"), self._clock())

    async def _persist(self) -> None:
        """Write the state; a disk that cannot take it costs the memory across a restart, never
        the decisions already applied or the passes to come."""
        try:
            await asyncio.to_thread(self._store.save, {
                name: PersistedTarget(rt.target.url, rt.state)
                for name, rt in self.targets.items()})
        except OSError as exc:
            error = f"{exc.strerror or exc} ({self._store.path})"
            if error != self.state_error:
                log.error("cannot write the controller's state, deciding on without it "
                          "(a restart would forget cooldowns and undone values): %s", error)
            self.state_error = error
            self._metrics.state_write_errors.inc()
            return
        if self.state_error is not None:
            log.info("the controller's state is written again (%s)", self._store.path)
        self.state_error = None

    def _managed(self, static: set[str], scraped: frozenset[str]) -> set[str]:
        """The configured targets, and the scraped instances discovery may manage, at most
        ``max_targets`` of them (the admin token goes to nothing else)."""
        discovered = sorted(i for i in scraped - static if self._discoverable(i))
        room = max(0, self.config.max_targets - len(static))
        if len(discovered) > room:
            self._note_once(f"over {self.config.max_targets} targets: managing the first "
                            f"{room} discovered instances (--max-targets)")
        return static | set(discovered[:room])

    def _discoverable(self, instance: str) -> bool:
        if self.config.may_discover(instance):
            return True
        if self.config.discover is not None and not valid_instance(instance):
            self._note_once(f"scraped instance {instance[:80]!r} is not host:port; not managed")
        return False

    def _note_once(self, message: str) -> None:
        """A warning per distinct problem, from a bounded set (hostile labels cannot grow it)."""
        if message in self._ignored_instances:
            return
        if len(self._ignored_instances) >= MAX_NOTED:
            self._ignored_instances.clear()
        self._ignored_instances.add(message)
        log.warning("%s", message)

    def _warn_unknown_alert_instances(self, managed: set[str]) -> None:
        for instance in sorted(self._book.instances() - managed)[:MAX_NOTED]:
            # An alert may name any instance; the admin token goes only to known targets.
            self._note_once(f"alert names instance {instance[:80]!r}, which is not a managed "
                            "target; ignoring it")

    def _forget_vanished(self, managed: set[str], now: float) -> None:
        """Drop targets no longer managed once they have been gone ``forget_after_seconds``:
        a target that flaps keeps its state, the map does not grow with every instance ever
        seen."""
        for name in managed:
            self._last_seen[name] = now
        for name in list(self.targets):
            seen = self._last_seen.setdefault(name, now)
            if name not in managed and now - seen > self.config.forget_after_seconds:
                del self.targets[name]
                del self._last_seen[name]
                self._metrics.forget(name)

    def _runtime(self, target: Target) -> TargetRuntime:
        runtime = self.targets.get(target.name)
        if runtime is None:
            runtime = TargetRuntime(target, recent=deque(maxlen=self.config.recent_decisions))
            self.targets[target.name] = runtime
        runtime.target = target
        return runtime

    async def _reconcile(self, rt: TargetRuntime, observation: Observation) -> None:
        now = self._clock()
        rt.observation = observation
        self._metrics.observation(rt.target.name, observation)
        if now < rt.retry_at:
            self._metrics.reconciles.labels(names.RESULT_SKIPPED).inc()
            return
        try:
            rt.limits = await self._actuator.read(rt.target)
        except ActuationError as exc:
            self._failed(rt, exc, now)
            return
        self._metrics.limits(rt.target.name, rt.limits.current)
        self._metrics.bounds(rt.target.name, rt.limits)
        state_before = rt.state
        decision = self._start(rt, now) or decide(self.config.slo, self.config.law,
                                                  observation, rt.limits, rt.state, now)
        self._metrics.decision(decision)
        self._metrics.scale(rt.target.name, decision.scale)
        if decision.changes and not self.config.dry_run:
            try:
                in_force = await self._actuator.apply(rt.target, decision.after)
            except ActuationError as exc:
                self._note(rt, decision, now, applied=False, error=exc.message)
                self._failed(rt, exc, now)
                return
            rt.limits = in_force
            self._metrics.limits(rt.target.name, in_force.current)
            rt.state = replace(decision.state, limits=in_force.current)
        elif decision.changes:
            # Dry run: remember the cooldown so the suggestion is not repeated every pass, but
            # there is no change in force to verify.
            rt.state = replace(decision.state, limits=decision.before, probe=None)
        else:
            rt.state = decision.state
        admission_error = await self._admission(rt, decision, previous=state_before)
        queued_error = await self._queued_tokens(rt, decision, previous=state_before)
        rt.failures, rt.retry_at, rt.last_error = 0, 0.0, None
        rt.last_result = names.RESULT_OK
        self._metrics.reconciles.labels(names.RESULT_OK).inc()
        self._note(rt, decision, now, applied=decision.changes and not self.config.dry_run,
                   admission_applied=decision.admission is not None and not self.config.dry_run
                   and admission_error is None, admission_error=admission_error,
                   queued_tokens_applied=decision.queued_tokens is not None
                   and not self.config.dry_run and queued_error is None,
                   queued_tokens_error=queued_error)
        if decision.changes and self._annotator is not None:
            await self._annotator.annotate(rt.target.name, decision, now)

    async def _admission(self, rt: TargetRuntime, decision: Decision, *,
                         previous: TargetState) -> str | None:
        """Move the target's deadline slack as the law asks (the admission knob); the error
        if it could not. A slack that did not move leaves the law's memory of it as it was, so
        the law decides again on the next pass from the slack the gate reports."""
        moved = decision.admission
        if moved is None:
            return None
        if self.config.dry_run:
            rt.state = replace(rt.state, slack_from=previous.slack_from,
                               slack_since=previous.slack_since)
            return None
        try:
            await self._actuator.set_slack(rt.target, moved.after)
        except ActuationError as exc:
            rt.state = replace(rt.state, slack_from=previous.slack_from,
                               slack_since=previous.slack_since)
            log.warning("target %s: the deadline slack stays at %g: %s", rt.target.name,
                        moved.before, exc.message)
            return exc.message
        return None

    async def _queued_tokens(self, rt: TargetRuntime, decision: Decision, *,
                             previous: TargetState) -> str | None:
        """Move vLLM's own bound as the law asks; the error if it could not. As for the slack,
        a bound that did not move leaves the law's memory of it as it was."""
        moved = decision.queued_tokens
        if moved is None:
            return None
        if not self.config.dry_run:
            try:
                await self._actuator.set_queued_tokens(rt.target, moved.after)
                return None
            except ActuationError as exc:
                log.warning("target %s: vLLM's max_num_queued_tokens stays at %s: %s",
                            rt.target.name, moved.before, exc.message)
                error: str | None = exc.message
        else:
            error = None
        rt.state = replace(rt.state, queued_tokens_held=previous.queued_tokens_held,
                           queued_tokens_from=previous.queued_tokens_from)
        return error

    def _start(self, rt: TargetRuntime, now: float) -> Decision | None:
        """With ``--start-limits``, a target's first pass without state sets them."""
        wanted = self.config.start_limits
        if wanted is None or rt.limits is None:
            return None
        return start_limits.start(wanted, rt.limits, rt.state, now)

    def _note(self, rt: TargetRuntime, decision: Decision, now: float, *, applied: bool,
              error: str | None = None, admission_applied: bool = False,
              admission_error: str | None = None, queued_tokens_applied: bool = False,
              queued_tokens_error: str | None = None) -> None:
        seen = rt.observation
        line = audit_lines.record(
            rt.target.name, decision, at=now, applied=applied, dry_run=self.config.dry_run,
            error=error, ranks=None if seen is None else seen.ranks(),
            woken_by=self.woken_by, admission_applied=admission_applied,
            admission_error=admission_error,
            queued_tokens_applied=queued_tokens_applied, queued_tokens_error=queued_tokens_error,
            refused=None if seen is None else seen.refused)
        previous = rt.last_decision
        rt.last_decision = line
        # Holds repeat every pass; the trail keeps changes, errors, changes of reason and of
        # the readings refused.
        if decision.changes or error or decision.admission is not None \
                or decision.queued_tokens is not None or previous is None or (
                previous["action"], previous["reason"], previous["refused"]) != (
                line["action"], line["reason"], line["refused"]):
            rt.recent.append(line)
            self._audit.write(line)

    def _failed(self, rt: TargetRuntime, exc: ActuationError, now: float) -> None:
        result = names.RESULT_PERMANENT_ERROR if exc.kind is ErrorKind.PERMANENT \
            else names.RESULT_TEMPORARY_ERROR
        repeated = rt.last_error == exc.message
        self._backoff(rt, result, exc.message, now)
        # A target that asked for longer (Retry-After) is left alone that long, within the
        # longest backoff: the wait is the target's, never the pass's.
        rt.retry_at = max(rt.retry_at, now + min(exc.retry_after_seconds,
                                                 self.config.max_backoff_seconds))
        if not repeated:
            log.warning("target %s: %s error: %s (next try in %.0fs)", rt.target.name,
                        exc.kind.value, exc.message, rt.retry_at - now)
        self._metrics.reconciles.labels(result).inc()

    def _backoff(self, rt: TargetRuntime, result: str, error: str, now: float) -> None:
        rt.failures += 1
        rt.last_error, rt.last_result = error, result
        rt.retry_at = now + self._delay(rt.failures, result)

    def _delay(self, failures: int, result: str) -> float:
        """A permanent error waits long; any other doubles from the resync interval up."""
        if result == names.RESULT_PERMANENT_ERROR:
            return self.config.permanent_retry_seconds
        # The exponent capped: a target down for days fails thousands of times, and 2.0**1024
        # overflows.
        return min(self.config.resync_seconds * 2.0 ** min(failures - 1, 32),
                   self.config.max_backoff_seconds)
