"""The controller's own Prometheus series, registered into a registry it is given."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from governor.controller import metric_names as names
from governor.controller.model import Decision, Limits, Observation, Param


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(names.DECISIONS, "Decisions of the control law, by action and "
                                 "reason", [names.LABEL_ACTION, names.LABEL_REASON],
                                 registry=registry)
        self.target_limits = Gauge(names.TARGET_LIMITS, "Batching limits in force on each "
                                   "target, as last read or set", [names.LABEL_TARGET,
                                                                    names.LABEL_PARAM],
                                   registry=registry)
        self.reconciles = Counter(names.RECONCILES, "Per-target reconciles, by result",
                                  [names.LABEL_RESULT], registry=registry)
        self.reconcile_duration = Histogram(names.RECONCILE_DURATION, "Duration of a reconcile "
                                            "pass over all targets",
                                            buckets=names.RECONCILE_DURATION_BUCKETS,
                                            registry=registry)
        self.last_reconcile = Gauge(names.LAST_RECONCILE, "Unix time of the last reconcile pass",
                                    registry=registry)
        self.alerts_received = Counter(names.ALERTS_RECEIVED, "Alerts received on the webhook, "
                                       "by status and outcome", [names.LABEL_STATUS,
                                                                 names.LABEL_OUTCOME],
                                       registry=registry)
        self.webhook_requests = Counter(names.WEBHOOK_REQUESTS, "Webhook requests, by HTTP "
                                        "status", [names.LABEL_CODE], registry=registry)
        self.alerts_firing = Gauge(names.ALERTS_FIRING, "Alerts the controller knows to be "
                                   "firing", registry=registry)
        self.observed = Gauge(names.OBSERVED, "The last observation of each target, in base "
                              "units", [names.LABEL_TARGET, names.LABEL_QUANTITY],
                              registry=registry)
        self.dry_run = Gauge(names.DRY_RUN, "1 when decisions are logged but not applied",
                             registry=registry)
        for result in (names.RESULT_OK, names.RESULT_TEMPORARY_ERROR,
                       names.RESULT_PERMANENT_ERROR, names.RESULT_SKIPPED):
            self.reconciles.labels(result)

    def decision(self, decision: Decision) -> None:
        self.decisions.labels(decision.action.value, decision.reason.value).inc()

    def limits(self, target: str, limits: Limits) -> None:
        for param in Param:
            self.target_limits.labels(target, param.value).set(limits.get(param))

    def observation(self, target: str, observation: Observation) -> None:
        # NaN, not a stale value, for "no data": a panel then shows a gap, not a lie.
        for quantity, value in observation.as_inputs().items():
            self.observed.labels(target, quantity).set(math.nan if value is None else value)
