"""The SLO controller's own ``governor_controller_*`` series, and the tag of its annotations."""

from __future__ import annotations

from typing import Final

from governor.contracts.declaration import Metric

LABEL_ACTION: Final = "action"
LABEL_REASON: Final = "reason"
LABEL_TARGET: Final = "target"
LABEL_PARAM: Final = "param"  # values: the service's PARAM_* (the knobs it sets)
LABEL_RESULT: Final = "result"
LABEL_STATUS: Final = "status"
LABEL_OUTCOME: Final = "outcome"
LABEL_CODE: Final = "code"
LABEL_QUANTITY: Final = "quantity"

# Values of ``result`` on RECONCILES.
RESULT_OK: Final = "ok"
RESULT_TEMPORARY_ERROR: Final = "temporary_error"
RESULT_PERMANENT_ERROR: Final = "permanent_error"
RESULT_SKIPPED: Final = "skipped"  # backing off after an error, or the target is blocked
# The controller failed on this target (a bug, not the target's answer); the others go on.
RESULT_INTERNAL_ERROR: Final = "internal_error"
RESULTS: Final = (RESULT_OK, RESULT_TEMPORARY_ERROR, RESULT_PERMANENT_ERROR, RESULT_SKIPPED,
                  RESULT_INTERNAL_ERROR)

# The tag on every Grafana annotation the controller posts (``--grafana-url``).
ANNOTATION_TAG: Final = "governor-controller"

DECISIONS: Final = Metric(
    "governor_controller_decisions", "counter",
    "Decisions of the control law, by action and reason", "decisions",
    (LABEL_ACTION, LABEL_REASON))
TARGET_LIMITS: Final = Metric(
    "governor_controller_target_limits", "gauge",
    "Batching limits in force on each target, as last read or set", "", (LABEL_TARGET, LABEL_PARAM))
# The range each target's admin route allows (its floor and its start-up ceiling), as last read:
# with the limits above, what a board of stock vLLM shows, which exports no limits of its own.
TARGET_FLOOR: Final = Metric(
    "governor_controller_target_floor", "gauge",
    "Lowest batching limits each target's admin route accepts, as last read", "",
    (LABEL_TARGET, LABEL_PARAM))
TARGET_CEILING: Final = Metric(
    "governor_controller_target_ceiling", "gauge",
    "Start-up batching limits of each target, never exceeded, as last read", "",
    (LABEL_TARGET, LABEL_PARAM))
RECONCILES: Final = Metric(
    "governor_controller_reconciles", "counter", "Per-target reconciles, by result", "reconciles",
    (LABEL_RESULT,))
RECONCILE_DURATION: Final = Metric(
    "governor_controller_reconcile_duration_seconds", "histogram",
    "Duration of a reconcile pass over all targets", "seconds",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
LAST_RECONCILE: Final = Metric(
    "governor_controller_last_reconcile_timestamp_seconds", "gauge",
    "Unix time of the last reconcile pass", "seconds")
ALERTS_RECEIVED: Final = Metric(
    "governor_controller_alerts_received", "counter",
    "Alerts received on the webhook, by status and outcome", "alerts",
    (LABEL_STATUS, LABEL_OUTCOME))
WEBHOOK_REQUESTS: Final = Metric(
    "governor_controller_webhook_requests", "counter", "Webhook requests, by HTTP status",
    "requests", (LABEL_CODE,))
ALERTS_FIRING: Final = Metric(
    "governor_controller_alerts_firing", "gauge", "Alerts the controller knows to be firing",
    "alerts")
# In base units; the ``quantity`` label names them with their unit suffix.
OBSERVED: Final = Metric(
    "governor_controller_observed", "gauge",
    "The last observation of each target, in base units", "", (LABEL_TARGET, LABEL_QUANTITY))
# Values of ``reason`` on DESIRED_REPLICAS: the law's ScaleAdvice reasons.
SCALE_NOT_OVERLOADED: Final = "not_overloaded"
SCALE_OVERLOAD: Final = "overload"
SCALE_WITHIN_TOLERANCE: Final = "overload_within_tolerance"
# The verdict blames demand (queue) or the GPU's saturation by the engine's own work: a replica
# more than it has, or as many as demand over what it serves.
SCALE_CAPACITY: Final = "capacity"
SCALE_REASONS: Final = (SCALE_NOT_OVERLOADED, SCALE_OVERLOAD, SCALE_WITHIN_TOLERANCE,
                        SCALE_CAPACITY)
# One series per target at a time (the current reason); 1 unless the law judges the target
# overloaded at its best limits, then ceil(demand / what the replica serves).
DESIRED_REPLICAS: Final = Metric(
    "governor_controller_desired_replicas", "gauge",
    "Replicas the demand on each target needs, by what one replica served (1: no scale-out)",
    "", (LABEL_TARGET, LABEL_REASON))
STATE_WRITE_ERRORS: Final = Metric(
    "governor_controller_state_write_errors", "counter",
    "Passes whose state could not be written (a full or read-only disk)", "errors")
DRY_RUN: Final = Metric(
    "governor_controller_dry_run", "gauge", "1 when decisions are logged but not applied")
