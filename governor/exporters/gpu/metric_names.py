"""Every metric name the GPU exporter exposes, in one place (generators import these).

Base units, ratios in 0-1, counters named without ``_total`` as prometheus_client declares them
(the exposed sample carries ``_total``). Labels: ``gpu`` (index), ``uuid``, ``model``.
Info families are named as exposed (``gpu_info``); :mod:`governor.exporters.gpu.catalog` holds each
name's type, help text, extra labels, NVML source and DCGM-exporter counterpart.
"""

from __future__ import annotations

from typing import Final

LABEL_GPU: Final = "gpu"
LABEL_UUID: Final = "uuid"
LABEL_MODEL: Final = "model"
LABEL_REASON: Final = "reason"
LABEL_XID: Final = "xid"
LABEL_KIND: Final = "kind"
LABEL_CLOCK: Final = "clock"  # sm | memory | graphics | video
LABEL_PIPE: Final = "pipe"  # hmma | imma | dfma | dmma (tensor) ; fp16 | fp32 | fp64 (non-tensor)
LABEL_PID: Final = "pid"
LABEL_CONTAINER: Final = "container"  # container id from the process's cgroup, "" when none
LABEL_PHASE: Final = "phase"  # sampler phase, see PHASE_*
LABEL_DRIVER_VERSION: Final = "driver_version"
LABEL_CUDA_VERSION: Final = "cuda_version"
LABEL_PCI_BUS_ID: Final = "pci_bus_id"
LABEL_MIG_UUID: Final = "mig_uuid"
LABEL_MIG_PROFILE: Final = "mig_profile"
LABEL_GPU_INSTANCE: Final = "gpu_instance"
LABEL_COMPUTE_INSTANCE: Final = "compute_instance"
LABEL_SOURCE: Final = "source"  # nvml | fake
LABEL_VERSION: Final = "version"

# ---- health of the exporter itself -------------------------------------------------------------
UP: Final = "gpu_up"  # 1 while the GPU answers, 0 once lost; absent when there is no NVML at all
EXPORTER_COLLECT_DURATION: Final = "gpu_exporter_collect_duration_seconds"
EXPORTER_ERRORS: Final = "gpu_exporter_errors"  # counter {kind}
EXPORTER_LAST_SUCCESS: Final = "gpu_exporter_last_success_timestamp_seconds"
EXPORTER_SNAPSHOT_AGE: Final = "gpu_exporter_snapshot_age_seconds"
EXPORTER_NVML_UP: Final = "gpu_exporter_nvml_up"  # 1 when NVML initialised, 0 without a driver
EXPORTER_PHASE_DURATION: Final = "gpu_exporter_collect_phase_duration_seconds"  # {phase}
EXPORTER_CPU: Final = "gpu_exporter_collect_cpu_seconds"  # counter: sampler thread CPU time
EXPORTER_COLLECTIONS: Final = "gpu_exporter_collections"  # counter: sampling rounds
EXPORTER_BUILD_INFO: Final = "gpu_exporter_build_info"  # info {version, source}

# ---- identity ------------------------------------------------------------------------------------
INFO: Final = "gpu_info"

# ---- activity ------------------------------------------------------------------------------------
UTILIZATION: Final = "gpu_utilization_ratio"
MEMORY_UTILIZATION: Final = "gpu_memory_controller_utilization_ratio"
GRAPHICS_ENGINE_ACTIVE: Final = "gpu_graphics_engine_active_ratio"
SM_ACTIVE: Final = "gpu_sm_active_ratio"
SM_OCCUPANCY: Final = "gpu_sm_occupancy_ratio"
TENSOR_ACTIVE: Final = "gpu_tensor_active_ratio"
TENSOR_PIPE_ACTIVE: Final = "gpu_tensor_pipe_active_ratio"  # {pipe}
FP_PIPE_ACTIVE: Final = "gpu_fp_pipe_active_ratio"  # {pipe}
DRAM_BANDWIDTH_UTILIZATION: Final = "gpu_dram_bandwidth_utilization_ratio"

# ---- interconnect --------------------------------------------------------------------------------
PCIE_TRANSMIT_RATE: Final = "gpu_pcie_transmit_bytes_per_second"
PCIE_RECEIVE_RATE: Final = "gpu_pcie_receive_bytes_per_second"
PCIE_TRANSMITTED: Final = "gpu_pcie_transmitted_bytes"  # counter
PCIE_RECEIVED: Final = "gpu_pcie_received_bytes"  # counter
PCIE_REPLAYS: Final = "gpu_pcie_replays"  # counter
NVLINK_TRANSMIT_RATE: Final = "gpu_nvlink_transmit_bytes_per_second"
NVLINK_RECEIVE_RATE: Final = "gpu_nvlink_receive_bytes_per_second"

# ---- memory --------------------------------------------------------------------------------------
MEMORY_TOTAL: Final = "gpu_memory_total_bytes"
MEMORY_USED: Final = "gpu_memory_used_bytes"
MEMORY_FREE: Final = "gpu_memory_free_bytes"
MEMORY_RESERVED: Final = "gpu_memory_reserved_bytes"
BAR1_TOTAL: Final = "gpu_bar1_memory_total_bytes"
BAR1_USED: Final = "gpu_bar1_memory_used_bytes"
PROCESS_MEMORY_USED: Final = "gpu_process_memory_used_bytes"  # {pid, container}

# ---- clocks --------------------------------------------------------------------------------------
CLOCK: Final = "gpu_clock_hz"  # {clock}

# ---- power and heat ------------------------------------------------------------------------------
POWER: Final = "gpu_power_watts"
POWER_LIMIT: Final = "gpu_power_limit_watts"
ENERGY: Final = "gpu_energy_joules"  # counter
TEMPERATURE: Final = "gpu_temperature_celsius"
MEMORY_TEMPERATURE: Final = "gpu_memory_temperature_celsius"
CLOCK_EVENT_ACTIVE: Final = "gpu_clock_event_active"  # gauge 0/1 {reason}
CLOCK_EVENT_DURATION: Final = "gpu_clock_event_duration_seconds"  # counter {reason}

# ---- errors --------------------------------------------------------------------------------------
XID_ERRORS: Final = "gpu_xid_errors"  # counter {xid}
ECC_UNCORRECTED_ERRORS: Final = "gpu_ecc_uncorrected_errors"  # counter
ECC_CORRECTED_ERRORS: Final = "gpu_ecc_corrected_errors"  # counter
REMAPPED_ROWS_CORRECTABLE: Final = "gpu_remapped_rows_correctable"  # counter
REMAPPED_ROWS_UNCORRECTABLE: Final = "gpu_remapped_rows_uncorrectable"  # counter
REMAPPED_ROWS_PENDING: Final = "gpu_remapped_rows_pending"  # gauge 0/1: a remap awaits reset
REMAPPED_ROWS_FAILURE: Final = "gpu_remapped_rows_failure"  # gauge 0/1: a remap has failed

# ---- MIG (only while MIG mode is on) -------------------------------------------------------------
MIG_MODE: Final = "gpu_mig_mode_enabled"
MIG_INFO: Final = "gpu_mig_device_info"  # {mig_uuid, mig_profile, gpu_instance, compute_instance}
MIG_MEMORY_TOTAL: Final = "gpu_mig_memory_total_bytes"  # {gpu_instance, compute_instance}
MIG_MEMORY_USED: Final = "gpu_mig_memory_used_bytes"
MIG_SM_ACTIVE: Final = "gpu_mig_sm_active_ratio"
MIG_TENSOR_ACTIVE: Final = "gpu_mig_tensor_active_ratio"
MIG_DRAM_BANDWIDTH_UTILIZATION: Final = "gpu_mig_dram_bandwidth_utilization_ratio"

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

# Values of the ``kind`` label of EXPORTER_ERRORS. Every kind is exposed from the start (at 0) so
# that rate() and increase() see the first error.
KIND_NOT_SUPPORTED: Final = "not_supported"  # counted once per (GPU, reading); then not asked
KIND_FUNCTION_NOT_FOUND: Final = "function_not_found"  # driver too old for a call; counted once
KIND_NOT_FOUND: Final = "not_found"
KIND_NO_PERMISSION: Final = "no_permission"
KIND_GPU_LOST: Final = "gpu_lost"
KIND_DRIVER_NOT_LOADED: Final = "driver_not_loaded"
KIND_LIBRARY_NOT_FOUND: Final = "library_not_found"
KIND_TIMEOUT: Final = "timeout"
KIND_NVML_OTHER: Final = "nvml_other"  # any other NVML return code
KIND_SAMPLER: Final = "sampler"  # an unexpected exception inside a sampling round
ERROR_KINDS: Final = (
    KIND_NOT_SUPPORTED, KIND_FUNCTION_NOT_FOUND, KIND_NOT_FOUND, KIND_NO_PERMISSION,
    KIND_GPU_LOST, KIND_DRIVER_NOT_LOADED, KIND_LIBRARY_NOT_FOUND, KIND_TIMEOUT, KIND_NVML_OTHER,
    KIND_SAMPLER,
)

# Values of the ``phase`` label of EXPORTER_PHASE_DURATION (wall time of the last round, all GPUs).
PHASE_CLASSIC: Final = "classic"  # one call per reading: utilisation, memory, clocks, power, …
PHASE_FIELDS: Final = "fields"  # nvmlDeviceGetFieldValues batches
PHASE_PROCESSES: Final = "processes"
PHASE_GPM: Final = "gpm"
PHASE_MIG: Final = "mig"
PHASE_SLOW: Final = "slow"  # energy, PCIe counters, remapped rows, BAR1, power limit
PHASES: Final = (PHASE_CLASSIC, PHASE_FIELDS, PHASE_PROCESSES, PHASE_GPM, PHASE_MIG, PHASE_SLOW)
