"""The controller's own Prometheus series, registered into a registry it is given.

Names, help, labels and buckets are declared in :mod:`governor.contracts.metrics.controller`.
"""

from __future__ import annotations

import contextlib
import math

from prometheus_client import CollectorRegistry

from governor.contracts.instruments import counter, gauge, histogram
from governor.contracts.metrics import controller as names
from governor.controller.model import (
    Decision,
    Limits,
    Observation,
    Param,
    ScaleAdvice,
    TargetLimits,
)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = counter(names.DECISIONS, registry)
        self.target_limits = gauge(names.TARGET_LIMITS, registry)
        self.target_floor = gauge(names.TARGET_FLOOR, registry)
        self.target_ceiling = gauge(names.TARGET_CEILING, registry)
        self.reconciles = counter(names.RECONCILES, registry)
        self.reconcile_duration = histogram(names.RECONCILE_DURATION, registry)
        self.last_reconcile = gauge(names.LAST_RECONCILE, registry)
        self.alerts_received = counter(names.ALERTS_RECEIVED, registry)
        self.webhook_requests = counter(names.WEBHOOK_REQUESTS, registry)
        self.alerts_firing = gauge(names.ALERTS_FIRING, registry)
        self.observed = gauge(names.OBSERVED, registry)
        self.dry_run = gauge(names.DRY_RUN, registry)
        self.state_write_errors = counter(names.STATE_WRITE_ERRORS, registry)
        self.desired_replicas = gauge(names.DESIRED_REPLICAS, registry)
        for result in names.RESULTS:
            self.reconciles.labels(result)
        # The quantities last set per target: a stage, rank or cause that goes away from a
        # target's observation takes its series with it.
        self._observed: dict[str, frozenset[str]] = {}

    def decision(self, decision: Decision) -> None:
        self.decisions.labels(decision.action.value, decision.reason.value).inc()

    def limits(self, target: str, limits: Limits) -> None:
        for param in Param:
            self.target_limits.labels(target, param.value).set(limits.get(param))

    def bounds(self, target: str, limits: TargetLimits) -> None:
        """The range the target's admin route allows, as it last answered."""
        for param in Param:
            self.target_floor.labels(target, param.value).set(limits.floor.get(param))
            self.target_ceiling.labels(target, param.value).set(limits.ceiling.get(param))

    def observation(self, target: str, observation: Observation) -> None:
        # NaN, not a stale value, for "no data": a panel then shows a gap, not a lie.
        inputs = observation.as_inputs()
        for quantity in self._observed.get(target, frozenset()) - inputs.keys():
            self.observed.remove(target, quantity)
        for quantity, value in inputs.items():
            self.observed.labels(target, quantity).set(math.nan if value is None else value)
        self._observed[target] = frozenset(inputs)

    def forget(self, target: str) -> None:
        """Every series of a target the controller no longer manages."""
        for quantity in self._observed.pop(target, frozenset()):
            self.observed.remove(target, quantity)
        for per_param in (self.target_limits, self.target_floor, self.target_ceiling):
            for param in Param:
                with contextlib.suppress(KeyError):  # never set for this target
                    per_param.remove(target, param.value)
        for reason in names.SCALE_REASONS:
            with contextlib.suppress(KeyError):
                self.desired_replicas.remove(target, reason)

    def scale(self, target: str, advice: ScaleAdvice) -> None:
        """One series per target, labelled with the current reason (the others removed), worth
        the replicas its demand needs, unrounded: ``sum`` over targets, rounded up once, is the
        fleet's desired size."""
        for reason in names.SCALE_REASONS:
            if reason != advice.reason:
                with contextlib.suppress(KeyError):  # never set for this target
                    self.desired_replicas.remove(target, reason)
        self.desired_replicas.labels(target, advice.reason).set(advice.replicas_needed)
