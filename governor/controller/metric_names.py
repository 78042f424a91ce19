"""Every metric name and label value the controller exposes, in one place.

Dashboards and alert generators import these; nobody retypes them. Counters are named without
``_total`` as prometheus_client declares them; the exposed series carry ``_total``.
"""

from __future__ import annotations

from typing import Final

DECISIONS: Final = "governor_controller_decisions"  # counter {action, reason}
TARGET_LIMITS: Final = "governor_controller_target_limits"  # gauge {target, param}
RECONCILES: Final = "governor_controller_reconciles"  # counter {result}
RECONCILE_DURATION: Final = "governor_controller_reconcile_duration_seconds"  # histogram
LAST_RECONCILE: Final = "governor_controller_last_reconcile_timestamp_seconds"  # gauge
ALERTS_RECEIVED: Final = "governor_controller_alerts_received"  # counter {status, outcome}
WEBHOOK_REQUESTS: Final = "governor_controller_webhook_requests"  # counter {code}
ALERTS_FIRING: Final = "governor_controller_alerts_firing"  # gauge
OBSERVED: Final = "governor_controller_observed"  # gauge {target, quantity}, base units
DRY_RUN: Final = "governor_controller_dry_run"  # gauge 0/1

# The tag on every Grafana annotation the controller posts (``--grafana-url``).
ANNOTATION_TAG: Final = "governor-controller"

LABEL_ACTION: Final = "action"
LABEL_REASON: Final = "reason"
LABEL_TARGET: Final = "target"
LABEL_PARAM: Final = "param"
LABEL_RESULT: Final = "result"
LABEL_STATUS: Final = "status"
LABEL_OUTCOME: Final = "outcome"
LABEL_CODE: Final = "code"
LABEL_QUANTITY: Final = "quantity"

# Values of the ``result`` label of RECONCILES.
RESULT_OK: Final = "ok"
RESULT_TEMPORARY_ERROR: Final = "temporary_error"
RESULT_PERMANENT_ERROR: Final = "permanent_error"
RESULT_SKIPPED: Final = "skipped"  # backing off after an error, or the target is blocked

RECONCILE_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
