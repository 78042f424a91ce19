"""The state of each GPU, as the health rules record it (``health.yml``), and what reads it.

:data:`STATE` is one series per GPU (the labels of the exporter's series: ``job``, ``instance``,
the target's selector, ``gpu``) whose value is :data:`HEALTHY`, :data:`WARN` or
:data:`CRITICAL`; :data:`REASON` holds one series per reason in force on a GPU (``reason``, one
of :data:`REASONS`), valued at the severity that reason gives while it holds and 0 otherwise.
The state is the worst of them. The GPU board, ``governor status`` and the runbooks read them::

    >>> STATE.name, REASON.name, STATE_NAMES[CRITICAL]
    ('gpu:health:state', 'gpu:health_reason:severity', 'CRITICAL')
"""

from __future__ import annotations

from typing import Final

from governor.contracts.declaration import Metric
from governor.contracts.metrics.gpu import LABEL_GPU, LABEL_REASON
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB

HEALTHY: Final = 0
WARN: Final = 1
CRITICAL: Final = 2
STATE_NAMES: Final = {HEALTHY: "HEALTHY", WARN: "WARN", CRITICAL: "CRITICAL"}

# Reasons, each with the severity it gives.
REASON_LOST: Final = "lost"  # NVML (or DCGM) stopped answering for the GPU
REASON_XID: Final = "xid"  # a critical XID in the last 5 minutes
REASON_ECC: Final = "ecc_uncorrected"  # uncorrected ECC errors in the last 5 minutes
REASON_REMAP_FAILED: Final = "row_remap_failed"
REASON_REMAP_PENDING: Final = "row_remap_pending"  # a remap waits for a GPU reset
REASON_THERMAL: Final = "thermal_throttle"
REASON_POWER: Final = "power_throttle"
REASON_PROCESSES: Final = "processes_high"  # more processes than the spec allows, held
REASON_IDLE_GROWTH: Final = "memory_grows_idle"  # a process's memory grows, its engine idle
REASONS: Final = {
    REASON_LOST: CRITICAL, REASON_XID: CRITICAL, REASON_ECC: CRITICAL,
    REASON_REMAP_FAILED: CRITICAL, REASON_REMAP_PENDING: WARN, REASON_THERMAL: WARN,
    REASON_POWER: WARN, REASON_PROCESSES: WARN, REASON_IDLE_GROWTH: WARN,
}
# What dcgm-exporter cannot tell: it exposes no process on a GPU (docs/dcgm.md).
NOT_IN_DCGM: Final = (REASON_PROCESSES, REASON_IDLE_GROWTH)

STATE: Final = Metric(
    "gpu:health:state", "gauge",
    "Each GPU's state: 0 HEALTHY, 1 WARN, 2 CRITICAL (the worst reason in force).", "",
    (LABEL_JOB, LABEL_INSTANCE, LABEL_GPU))
REASON: Final = Metric(
    "gpu:health_reason:severity", "gauge",
    "Each reason's severity on a GPU: 1 (WARN) or 2 (CRITICAL) while it holds, else 0.",
    "", (LABEL_JOB, LABEL_INSTANCE, LABEL_GPU, LABEL_REASON))
