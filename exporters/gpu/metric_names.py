"""Every metric name the GPU exporter exposes, in one place (generators import these).

Base units, ratios in 0-1, counters named without ``_total`` as prometheus_client declares them
(the exposed sample carries ``_total``). Labels: ``gpu`` (index), ``uuid``, ``model``.
"""

from __future__ import annotations

from typing import Final

LABEL_GPU: Final = "gpu"
LABEL_UUID: Final = "uuid"
LABEL_MODEL: Final = "model"
LABEL_REASON: Final = "reason"
LABEL_XID: Final = "xid"
LABEL_KIND: Final = "kind"

# ---- health of the exporter itself ---
UP: Final = "gpu_up"  # 1 while the GPU answers, 0 once lost; absent when there is no NVML at all
EXPORTER_COLLECT_DURATION: Final = "gpu_exporter_collect_duration_seconds"
EXPORTER_ERRORS: Final = "gpu_exporter_errors"  # counter {kind}
EXPORTER_LAST_SUCCESS: Final = "gpu_exporter_last_success_timestamp_seconds"
EXPORTER_SNAPSHOT_AGE: Final = "gpu_exporter_snapshot_age_seconds"

# ---- identity ---
INFO: Final = "gpu_info"

# ---- activity ---
UTILIZATION: Final = "gpu_utilization_ratio"
MEMORY_UTILIZATION: Final = "gpu_memory_controller_utilization_ratio"
SM_ACTIVE: Final = "gpu_sm_active_ratio"
SM_OCCUPANCY: Final = "gpu_sm_occupancy_ratio"
TENSOR_ACTIVE: Final = "gpu_tensor_active_ratio"
DRAM_BANDWIDTH_UTILIZATION: Final = "gpu_dram_bandwidth_utilization_ratio"

# ---- memory ---
MEMORY_TOTAL: Final = "gpu_memory_total_bytes"
MEMORY_USED: Final = "gpu_memory_used_bytes"
MEMORY_FREE: Final = "gpu_memory_free_bytes"

# ---- power and heat ---
POWER: Final = "gpu_power_watts"
POWER_LIMIT: Final = "gpu_power_limit_watts"
ENERGY: Final = "gpu_energy_joules"  # counter
TEMPERATURE: Final = "gpu_temperature_celsius"
CLOCK_EVENT_ACTIVE: Final = "gpu_clock_event_active"  # gauge 0/1 {reason}

# ---- errors ---
XID_ERRORS: Final = "gpu_xid_errors"  # counter {xid}
ECC_UNCORRECTED_ERRORS: Final = "gpu_ecc_uncorrected_errors"  # counter

# Values of the ``reason`` label of CLOCK_EVENT_ACTIVE (NVML clock-event reason bits).
REASON_GPU_IDLE: Final = "gpu_idle"
REASON_APPLICATIONS_CLOCKS: Final = "applications_clocks"
REASON_SW_POWER_CAP: Final = "sw_power_cap"
REASON_HW_SLOWDOWN: Final = "hw_slowdown"
REASON_SYNC_BOOST: Final = "sync_boost"
REASON_SW_THERMAL: Final = "sw_thermal"
REASON_HW_THERMAL: Final = "hw_thermal"
REASON_HW_POWER_BRAKE: Final = "hw_power_brake"
THERMAL_REASONS: Final = (REASON_SW_THERMAL, REASON_HW_THERMAL)
POWER_REASONS: Final = (REASON_SW_POWER_CAP, REASON_HW_POWER_BRAKE)
